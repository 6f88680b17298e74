package image

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/klauspost/compress/zstd"
)

// importFrom reads src (an OCI layout directory, an OCI layout tarball or a
// docker-archive) and unpacks its linux/amd64 image.
func (s *Store) importFrom(ctx context.Context, label, src string) (string, error) {
	st, err := os.Stat(src)
	if err != nil {
		return "", fmt.Errorf("reading source: %w", err)
	}
	if st.IsDir() {
		return s.importLayout(ctx, label, src)
	}
	kind, err := tarKind(ctx, src, s.opts.MaxBytes)
	if err != nil {
		return "", err
	}
	switch kind {
	case "oci":
		// Unpacked with the image unpacker, so a hostile archive cannot
		// write outside the store while being read.
		tmp, done, err := s.tempDir()
		if err != nil {
			return "", err
		}
		defer done()
		u, err := newUnpacker(tmp, s.opts.MaxBytes, s.inflight)
		if err != nil {
			return "", err
		}
		defer u.close()
		dec, err := openArchive(src)
		if err != nil {
			return "", err
		}
		defer dec.Close()
		if err := u.apply(&meter{ctx: ctx, r: dec, limit: s.opts.MaxBytes, over: fmt.Errorf("%w: archive exceeds the size cap", errTooLarge)}); err != nil {
			return "", fmt.Errorf("reading OCI layout archive: %w", err)
		}
		return s.importLayout(ctx, label, tmp)
	default:
		if err := checkDockerArchive(src, s.opts.MaxBytes, maxEntries); err != nil {
			return "", err
		}
		img, err := tarball.Image(func() (io.ReadCloser, error) { return os.Open(src) }, nil)
		if err != nil {
			return "", invalidf("reading docker archive: %v", err)
		}
		return s.ensure(ctx, label, img, "", nil)
	}
}

func (s *Store) importLayout(ctx context.Context, label, dir string) (string, error) {
	if err := checkLayout(dir); err != nil {
		return "", err
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return "", invalidf("not an OCI image layout: %v", err)
	}
	meta := layoutMeta(dir)
	var img v1.Image
	img, want, err := selectImage(idx, 0, meta)
	if err != nil {
		return "", err
	}
	// The reader takes the configuration's size from its file, not from
	// the manifest.
	m, err := img.Manifest()
	if err != nil {
		return "", fmt.Errorf("reading manifest: %w", err)
	}
	if err := meta("configuration", m.Config); err != nil {
		return "", err
	}
	return s.ensure(ctx, label, img, want, nil)
}

// checkLayout refuses a layout whose own files would lead its reader out
// of it, or make it read without end: index.json must be a regular file
// of at most maxMeta bytes, blobs and blobs/sha256 directories, not links
// (the reader itself refuses a blob that is a link or not a regular
// file). A link in the layout may point anywhere on the host, a FIFO or
// a device.
func checkLayout(dir string) error {
	fi, err := os.Lstat(filepath.Join(dir, "index.json"))
	switch {
	case err != nil:
		return invalidf("not an OCI image layout: %v", err)
	case !fi.Mode().IsRegular():
		return invalidf("not an OCI image layout: index.json is not a regular file")
	case fi.Size() > maxMeta:
		return invalidf("index.json of %d bytes, over the %d bytes an index may have", fi.Size(), maxMeta)
	}
	for _, p := range []string{"blobs", "blobs/sha256"} {
		fi, err := os.Lstat(filepath.Join(dir, p))
		if errors.Is(err, fs.ErrNotExist) {
			break // the reader says which blob is missing
		}
		if err != nil {
			return fmt.Errorf("reading layout: %w", err)
		}
		if !fi.IsDir() {
			return invalidf("not an OCI image layout: %s is not a directory", p)
		}
	}
	return nil
}

// layoutMeta returns a check of an index's, a manifest's or a
// configuration's blob in the layout at dir, before the reader takes it
// whole into memory: at most maxMeta bytes, whatever its descriptor says.
func layoutMeta(dir string) func(what string, d v1.Descriptor) error {
	return func(what string, d v1.Descriptor) error {
		fi, err := os.Lstat(filepath.Join(dir, "blobs", d.Digest.Algorithm, d.Digest.Hex))
		if err == nil && fi.Size() > maxMeta {
			return invalidf("%s %s of %d bytes, over the %d bytes it may have", what, d.Digest, fi.Size(), maxMeta)
		}
		return nil // the reader reports a missing blob, a link or a FIFO
	}
}

// openArchive opens the tarball src, decompressed; closing the result
// closes the file too.
func openArchive(src string) (io.ReadCloser, error) {
	f, err := os.Open(src)
	if err != nil {
		return nil, fmt.Errorf("reading source: %w", err)
	}
	dec, err := decompress(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	return closeBoth{dec, f}, nil
}

// closeBoth is a decompressor whose Close also closes its file.
type closeBoth struct {
	io.ReadCloser
	f *os.File
}

func (c closeBoth) Read(b []byte) (int, error) {
	n, err := c.ReadCloser.Read(b)
	return n, zstdTooLarge(err)
}

func (c closeBoth) Close() error {
	err := c.ReadCloser.Close()
	if ferr := c.f.Close(); err == nil {
		err = ferr
	}
	return err
}

// tarKind tells an OCI layout archive ("oci") from a docker-archive
// ("docker") by the files at its top. It reads, decompressed, at most
// limit bytes (gzip inflates a thousandfold) and stops when ctx ends.
func tarKind(ctx context.Context, src string, limit int64) (string, error) {
	dec, err := openArchive(src)
	if err != nil {
		return "", err
	}
	defer dec.Close()
	tr := tar.NewReader(&meter{ctx: ctx, r: dec, limit: limit, over: fmt.Errorf("%w: archive exceeds the size cap", errTooLarge)})
	docker := false
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if errors.Is(err, errTooLarge) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return "", err
		}
		if err != nil {
			return "", invalidf("not a tar archive: %v", err)
		}
		switch parts, _ := clean(hdr.Name); {
		case len(parts) == 1 && parts[0] == "oci-layout":
			return "oci", nil
		case len(parts) == 1 && parts[0] == "manifest.json":
			docker = true
		}
	}
	if docker {
		return "docker", nil
	}
	return "", invalidf("neither an OCI layout nor a docker archive")
}

// checkDockerArchive refuses a docker-archive whose manifest.json or
// image configuration is over maxMeta bytes, or whose entries are over
// limit bytes in all: the reader takes the first two whole into memory,
// and reads every layer through (compressing it, to learn its digest)
// before the unpacker's cap is reached, without heeding cancellation —
// and a sparse entry of a few bytes in the archive may declare any size.
// It also refuses an archive of more than entries entries, whose headers
// it keeps.
func checkDockerArchive(src string, limit int64, entries int) error {
	// The first entry of each name, as the reader takes it.
	hdrs := map[string]*tar.Header{}
	at := map[*tar.Header]int{} // its place in the archive
	n := 0
	var total int64
	if err := eachEntry(src, func(name string, hdr *tar.Header, _ io.Reader) error {
		if n >= entries {
			// Each kept header costs memory: an archive of empty entries
			// is refused as an image of that many would be.
			return fmt.Errorf("%w: docker archive of more than %d entries", errTooLarge, entries)
		}
		if _, ok := hdrs[name]; !ok {
			hdrs[name], at[hdr] = hdr, n
		}
		n++
		if hdr.Size > 0 {
			total = min(total, limit+1) + min(hdr.Size, limit+1) // no overflow
		}
		return nil
	}); err != nil {
		return err
	}
	if total > limit {
		return fmt.Errorf("%w: docker archive's entries exceed the size cap of %d bytes", errTooLarge, limit)
	}
	// resolve is name through the links the reader follows; ok is false
	// for a chain longer than maxLinkChain (or a loop).
	resolve := func(name string) (string, *tar.Header, bool) {
		for range maxLinkChain + 1 {
			hdr := hdrs[name]
			if hdr == nil || (hdr.Typeflag != tar.TypeSymlink && hdr.Typeflag != tar.TypeLink) {
				return name, hdr, true
			}
			name = path.Join(path.Dir(name), path.Clean(hdr.Linkname))
		}
		return name, nil, false
	}
	// The reader reads the archive through again for each link it
	// follows: a chain of thousands of links (each a header) would have it
	// read the archive thousands of times.
	for name, hdr := range hdrs {
		if hdr.Typeflag == tar.TypeSymlink || hdr.Typeflag == tar.TypeLink {
			if _, _, ok := resolve(name); !ok {
				return invalidf("docker archive's %s: a chain of more than %d links, or a loop", name, maxLinkChain)
			}
		}
	}
	_, hdr, _ := resolve("manifest.json")
	if hdr == nil {
		return nil // the reader says what is wrong
	}
	if hdr.Size > maxMeta {
		return invalidf("docker archive's manifest.json of %d bytes, over the %d bytes it may have", hdr.Size, maxMeta)
	}
	var manifest []byte
	n = 0
	if err := eachEntry(src, func(_ string, _ *tar.Header, r io.Reader) error {
		if n++; n-1 != at[hdr] {
			return nil
		}
		var err error
		manifest, err = io.ReadAll(io.LimitReader(r, maxMeta))
		return err
	}); err != nil {
		return err
	}
	var images []struct{ Config string }
	if json.Unmarshal(manifest, &images) != nil {
		return nil // the reader says what is wrong
	}
	for _, im := range images {
		if _, hdr, _ := resolve(path.Clean(im.Config)); hdr != nil && hdr.Size > maxMeta {
			return invalidf("docker archive's image configuration %s of %d bytes, over the %d bytes it may have", im.Config, hdr.Size, maxMeta)
		}
	}
	return nil
}

// eachEntry calls fn with each entry of the tarball src, its name cleaned.
func eachEntry(src string, fn func(name string, hdr *tar.Header, r io.Reader) error) error {
	f, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("reading source: %w", err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return invalidf("reading docker archive: %v", err)
		}
		if err := fn(path.Clean(hdr.Name), hdr, tr); err != nil {
			return invalidf("reading docker archive: %v", err)
		}
	}
}

var zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}

// decompress picks gzip, zstd or none by the stream's first bytes.
func decompress(r io.Reader) (io.ReadCloser, error) {
	br := bufio.NewReader(r)
	head, err := br.Peek(4)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	switch {
	case len(head) >= 2 && head[0] == 0x1f && head[1] == 0x8b:
		return gzip.NewReader(br)
	case bytes.HasPrefix(head, zstdMagic):
		d, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(maxZstdWindow), zstd.WithDecoderMaxMemory(maxZstdWindow))
		if err != nil {
			return nil, err
		}
		return d.IOReadCloser(), nil
	}
	return io.NopCloser(br), nil
}

// maxLinkChain bounds the links a docker-archive's reader follows from one
// name (docker save writes a link to a layer, not to a link).
const maxLinkChain = 16

// maxMeta bounds an index, a manifest and an image configuration, each
// read whole into memory (a layer is streamed).
const maxMeta = 8 << 20

// maxZstdWindow bounds the window a zstd frame may declare, which its
// decoder allocates whatever the layer's length (a frame of a few hundred
// bytes may declare gigabytes), once for each layer being unpacked. zstd's
// levels use up to 8 MiB, and up to 64 MiB with --long=26.
const maxZstdWindow = 64 << 20

// zstdTooLarge makes a zstd decoder's refusal of a window over
// maxZstdWindow the image's fault.
func zstdTooLarge(err error) error {
	if errors.Is(err, zstd.ErrWindowSizeExceeded) || errors.Is(err, zstd.ErrDecoderSizeExceeded) {
		return fmt.Errorf("%w: a zstd window over %d MiB", errTooLarge, maxZstdWindow>>20)
	}
	return err
}
