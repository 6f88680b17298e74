package image

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

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
	kind, err := tarKind(src)
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
		u, err := newUnpacker(tmp, s.opts.MaxBytes)
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
		img, err := tarball.Image(func() (io.ReadCloser, error) { return os.Open(src) }, nil)
		if err != nil {
			return "", invalidf("reading docker archive: %v", err)
		}
		return s.ensure(ctx, label, img, "", nil)
	}
}

func (s *Store) importLayout(ctx context.Context, label, dir string) (string, error) {
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return "", invalidf("not an OCI image layout: %v", err)
	}
	var img v1.Image
	img, want, err := selectImage(idx, 0)
	if err != nil {
		return "", err
	}
	return s.ensure(ctx, label, img, want, nil)
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

func (c closeBoth) Close() error {
	err := c.ReadCloser.Close()
	if ferr := c.f.Close(); err == nil {
		err = ferr
	}
	return err
}

// tarKind tells an OCI layout archive ("oci") from a docker-archive
// ("docker") by the files at its top.
func tarKind(src string) (string, error) {
	dec, err := openArchive(src)
	if err != nil {
		return "", err
	}
	defer dec.Close()
	tr := tar.NewReader(dec)
	docker := false
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
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
		d, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(256<<20))
		if err != nil {
			return nil, err
		}
		return d.IOReadCloser(), nil
	}
	return io.NopCloser(br), nil
}
