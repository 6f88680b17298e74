//go:build linux

package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sys/unix"
)

// writeLayout writes img as an OCI layout directory at dir.
func writeLayout(t *testing.T, dir string, img v1.Image) {
	t.Helper()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img); err != nil {
		t.Fatal(err)
	}
}

// tarLayout writes the layout directory lay as a tarball at dst, with
// extra entries after it (a name the directory has is replaced).
func tarLayout(t *testing.T, lay, dst string, extra ...ent) {
	t.Helper()
	replaced := map[string]bool{}
	for _, e := range extra {
		replaced[e.name] = true
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err := filepath.Walk(lay, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == lay {
			return err
		}
		rel, _ := filepath.Rel(lay, p)
		if replaced[rel] {
			if fi.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		h, _ := tar.FileInfoHeader(fi, "")
		h.Name = rel
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			_, err = tw.Write(b)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range extra {
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: e.mode, Size: int64(len(e.body)), ModTime: layerTime}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(e.body))
	}
	tw.Close()
	if err := os.WriteFile(dst, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// padJSON rewrites the blob of desc in the layout at lay with n bytes of
// white space in front (still the same JSON), under its new digest, and
// returns the new descriptor.
func padJSON(t *testing.T, lay string, desc v1.Descriptor, n int) v1.Descriptor {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(lay, "blobs", desc.Digest.Algorithm, desc.Digest.Hex))
	if err != nil {
		t.Fatal(err)
	}
	b = append(bytes.Repeat([]byte(" "), n), b...)
	sum := sha256.Sum256(b)
	desc.Digest = v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}
	desc.Size = int64(len(b))
	if err := os.WriteFile(filepath.Join(lay, "blobs", "sha256", desc.Digest.Hex), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return desc
}

// writeIndex makes index.json of the layout at lay name the one manifest m.
func writeIndex(t *testing.T, lay string, m v1.Descriptor) {
	t.Helper()
	js, _ := json.Marshal(v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex, Manifests: []v1.Descriptor{m}})
	if err := os.WriteFile(filepath.Join(lay, "index.json"), js, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestImportLayoutHostile imports OCI layouts (directories and tarballs)
// whose own files, rather than their layers, are hostile: a link that
// leads the reader out of the layout, or an index, manifest or
// configuration too large to be read into memory. Each is refused without
// reading what it points at, and leaves nothing behind.
func TestImportLayoutHostile(t *testing.T) {
	f := newFixture(t, Options{MaxBytes: 256 << 20})
	src := filepath.Join(f.base, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	img := goodImage(t, "layout")
	good := filepath.Join(src, "good")
	writeLayout(t, good, img)
	idx, err := layout.ImageIndexFromPath(good)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	mdesc := im.Manifests[0]

	// A FIFO outside the archive: a reader that opens it waits for ever.
	fifo := filepath.Join(src, "fifo")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	// Blobs outside the archive, where a link in it may point.
	hostBlobs := filepath.Join(good, "blobs", "sha256")

	cases := []struct {
		name string
		src  func(t *testing.T) string
		want string
	}{
		{"index-link-to-fifo", func(t *testing.T) string {
			p := filepath.Join(src, "fifo.tar")
			tarLayout(t, good, p, symlink("index.json", fifo))
			return p
		}, "index.json"},
		{"blobs-link-to-host", func(t *testing.T) string {
			p := filepath.Join(src, "blobs.tar")
			tarLayout(t, good, p, symlink("blobs/sha256", hostBlobs))
			return p
		}, "blobs/sha256"},
		{"index-link-in-dir", func(t *testing.T) string {
			d := filepath.Join(src, "linkdir")
			writeLayout(t, d, img)
			os.Remove(filepath.Join(d, "index.json"))
			if err := os.Symlink(fifo, filepath.Join(d, "index.json")); err != nil {
				t.Fatal(err)
			}
			return d
		}, "index.json"},
		{"huge-index", func(t *testing.T) string {
			d := filepath.Join(src, "bigindex")
			writeLayout(t, d, img)
			b, _ := os.ReadFile(filepath.Join(d, "index.json"))
			b = append(bytes.Repeat([]byte(" "), maxMeta), b...)
			os.WriteFile(filepath.Join(d, "index.json"), b, 0o644)
			p := filepath.Join(src, "bigindex.tar")
			tarLayout(t, d, p)
			return p
		}, "index.json"},
		{"huge-manifest", func(t *testing.T) string {
			d := filepath.Join(src, "bigmanifest")
			writeLayout(t, d, img)
			writeIndex(t, d, padJSON(t, d, mdesc, maxMeta))
			return d
		}, "manifest"},
		{"huge-config", func(t *testing.T) string {
			d := filepath.Join(src, "bigconfig")
			writeLayout(t, d, img)
			m, err := img.Manifest()
			if err != nil {
				t.Fatal(err)
			}
			m = m.DeepCopy()
			m.Config = padJSON(t, d, m.Config, maxMeta)
			js, _ := json.Marshal(m)
			sum := sha256.Sum256(js)
			md := mdesc
			md.Digest = v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}
			md.Size = int64(len(js))
			os.WriteFile(filepath.Join(d, "blobs", "sha256", md.Digest.Hex), js, 0o644)
			writeIndex(t, d, md)
			return d
		}, "configuration"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := c.src(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := f.s.Import(ctx, "h-"+c.name, p)
				done <- err
			}()
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				// Release the reader stuck on the FIFO.
				if w, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
					w.Close()
				}
				err = <-done
				t.Errorf("import still reading after 10s; then: %v", err)
			}
			if err == nil {
				t.Fatalf("imported")
			}
			imageError(t, err, true, c.want)
			if err := f.s.Check("h-" + c.name); err == nil {
				t.Errorf("the name was made")
			}
			f.tmpEmpty()
		})
	}
	if _, err := f.s.Import(context.Background(), "after", good); err != nil {
		t.Fatalf("a good layout after: %v", err)
	}
}

// TestPullHugeConfigRefused: a registry whose manifest declares a huge
// configuration is refused before the configuration is asked for (it
// would be read into memory whole).
func TestPullHugeConfigRefused(t *testing.T) {
	f := newFixture(t, Options{})
	cfgSize := int64(4 * maxMeta)
	cfgDigest := "sha256:" + strings.Repeat("ab", 32)
	man, _ := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     types.OCIManifestSchema1,
		"config":        map[string]any{"mediaType": types.OCIConfigJSON, "digest": cfgDigest, "size": cfgSize},
		"layers":        []any{},
	})
	sum := sha256.Sum256(man)
	mdigest := "sha256:" + hex.EncodeToString(sum[:])
	var sent atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/v2/":
		case strings.HasSuffix(r.URL.Path, "/manifests/"+mdigest):
			w.Header().Set("Content-Type", string(types.OCIManifestSchema1))
			w.Header().Set("Docker-Content-Digest", mdigest)
			w.Write(man)
		case strings.HasSuffix(r.URL.Path, "/blobs/"+cfgDigest):
			w.Header().Set("Content-Length", fmt.Sprint(cfgSize))
			n, _ := io.Copy(w, io.LimitReader(zeros{}, cfgSize))
			sent.Add(n)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	ref := strings.TrimPrefix(srv.URL, "http://") + "/test/big@" + mdigest
	_, err := f.s.Pull(context.Background(), ref)
	imageError(t, err, true, "configuration")
	if n := sent.Load(); n > 0 {
		t.Errorf("the registry sent %d bytes of the configuration", n)
	}
	f.tmpEmpty()
}

type zeros struct{}

func (zeros) Read(b []byte) (int, error) {
	clear(b)
	return len(b), nil
}

// sparseEntry is a PAX (GNU sparse 1.0) tar entry name of size bytes,
// all a hole: a few hundred bytes in the archive, size bytes to its
// reader. archive/tar writes no sparse files, so the headers are made by
// hand.
func sparseEntry(t *testing.T, name string, size int64) []byte {
	t.Helper()
	rec := func(k, v string) string {
		r := " " + k + "=" + v + "\n"
		n := len(r) + 1
		for len(fmt.Sprint(n))+len(r) != n {
			n++
		}
		return fmt.Sprint(n) + r
	}
	pax := rec("GNU.sparse.major", "1") + rec("GNU.sparse.minor", "0") + rec("GNU.sparse.name", name) + rec("GNU.sparse.realsize", fmt.Sprint(size))
	spmap := make([]byte, 512)
	copy(spmap, "0\n")
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range []struct {
		name string
		body []byte
	}{{"PaxHeaders/" + name, []byte(pax)}, {name, spmap}} {
		if err := tw.WriteHeader(&tar.Header{Name: e.name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(e.body)), Format: tar.FormatUSTAR}); err != nil {
			t.Fatal(err)
		}
		tw.Write(e.body)
	}
	tw.Flush()
	b := buf.Bytes()
	// The first header becomes the PAX header of the second.
	b[156] = tar.TypeXHeader
	copy(b[148:156], "        ")
	sum := 0
	for _, c := range b[:512] {
		sum += int(c)
	}
	copy(b[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return b
}

// TestImportDockerArchiveSparseConfig imports a docker-archive whose image
// configuration is a sparse entry of 64 MiB: it is refused before the
// reader takes it into memory.
func TestImportDockerArchiveSparseConfig(t *testing.T) {
	f := newFixture(t, Options{})
	src := filepath.Join(f.base, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range []struct{ name, body string }{
		{"manifest.json", `[{"Config":"cfg.json","RepoTags":null,"Layers":["layer.tar"]}]`},
		{"layer.tar", string(tarBytes(t, file("etc/os-release", "ID=x\n")))},
	} {
		tw.WriteHeader(&tar.Header{Name: e.name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(e.body))})
		tw.Write([]byte(e.body))
	}
	tw.Flush()
	buf.Write(sparseEntry(t, "cfg.json", 64<<20))
	buf.Write(make([]byte, 1024)) // the archive's end
	archive := filepath.Join(src, "sparse.tar")
	if err := os.WriteFile(archive, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	// The entry reads as 64 MiB.
	a, _ := os.Open(archive)
	tr := tar.NewReader(a)
	for {
		hdr, err := tr.Next()
		if err != nil {
			t.Fatalf("no cfg.json in the archive: %v", err)
		}
		if hdr.Name == "cfg.json" {
			if n, err := io.Copy(io.Discard, tr); err != nil || n != 64<<20 {
				t.Fatalf("cfg.json reads as %d bytes (%v)", n, err)
			}
			break
		}
	}
	a.Close()

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := f.s.Import(context.Background(), "sparse", archive)
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 16<<20 {
		t.Errorf("the import allocated %d MiB", got>>20)
	}
	imageError(t, err, true, "configuration cfg.json of 67108864 bytes")
	f.tmpEmpty()
}

// TestImportDockerArchiveSparseLayer imports a docker-archive whose layer
// is a sparse entry of 64 GiB in a 5 KB archive, with a 64 MiB cap: the
// reader would compress all of it to learn its digest before anything
// reaches the cap. It is refused at once.
func TestImportDockerArchiveSparseLayer(t *testing.T) {
	f := newFixture(t, Options{MaxBytes: 64 << 20})
	src := filepath.Join(f.base, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := `{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":["sha256:` + strings.Repeat("0", 64) + `"]},"config":{}}`
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range []struct{ name, body string }{
		{"manifest.json", `[{"Config":"cfg.json","RepoTags":null,"Layers":["layer.tar"]}]`},
		{"cfg.json", cfg},
	} {
		tw.WriteHeader(&tar.Header{Name: e.name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(e.body))})
		tw.Write([]byte(e.body))
	}
	tw.Flush()
	buf.Write(sparseEntry(t, "layer.tar", 64<<30))
	buf.Write(make([]byte, 1024))
	archive := filepath.Join(src, "sparse.tar")
	if err := os.WriteFile(archive, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := f.s.Import(context.Background(), "sparse", archive)
		done <- err
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		err = <-done
		t.Errorf("the import took %v", time.Since(start).Round(time.Second))
	}
	imageError(t, err, true, "too large")
	f.tmpEmpty()
}

// deepEnts are n empty files, each depth directories below a top-level
// directory of its own: a few KB of stream each, depth directories on
// disk, and depth path prefixes for the unpacker to remember.
func deepEnts(n, depth int) []ent {
	var ents []ent
	for i := range n {
		ents = append(ents, file(fmt.Sprintf("d%d/", i)+strings.Repeat("a/", depth)+"f", ""))
	}
	return ents
}

// TestDeepNamesBounded: directories made on the way to deep names count
// against the size cap (each costs a block on disk however short its
// entry), and the unpacker's memory of what a layer wrote grows with the
// names' elements, not with their depth times their length.
func TestDeepNamesBounded(t *testing.T) {
	t.Run("dirs-count", func(t *testing.T) {
		f := newFixture(t, Options{MaxBytes: 16 << 20})
		img := imageOf(t, nil, layerOf(t, deepEnts(40, 1000)...))
		_, err := f.importImage("deep", img)
		imageError(t, err, true, "too large")
		f.tmpEmpty()
	})
	t.Run("memory", func(t *testing.T) {
		f := newFixture(t, Options{MaxBytes: 1 << 30})
		img := imageOf(t, nil, layerOf(t, deepEnts(4, 2000)...))
		if _, err := img.RawManifest(); err != nil { // digests computed before measuring
			t.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := f.importImage("deep", img)
		runtime.ReadMemStats(&after)
		if err != nil {
			t.Fatal(err)
		}
		if got := after.TotalAlloc - before.TotalAlloc; got > 24<<20 {
			t.Errorf("unpacking 4 names of 2000 elements allocated %d MiB", got>>20)
		}
	})
}

// TestImportInflatingArchiveStopsAtCap: a gzip'd archive of 32 MB whose
// first entry inflates to 32 GiB (gzip members of zeros, repeated) before
// its oci-layout: telling what kind of archive it is stops at the cap,
// rather than inflating it all.
func TestImportInflatingArchiveStopsAtCap(t *testing.T) {
	f := newFixture(t, Options{MaxBytes: 8 << 20})
	src := filepath.Join(f.base, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	member := func(b []byte) []byte {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		zw.Write(b)
		zw.Close()
		return buf.Bytes()
	}
	const chunk, n = 64 << 20, 512
	var head bytes.Buffer
	tw := tar.NewWriter(&head)
	tw.WriteHeader(&tar.Header{Name: "zeros", Typeflag: tar.TypeReg, Mode: 0o644, Size: chunk * n})
	tw.Flush()
	var tail bytes.Buffer
	tw = tar.NewWriter(&tail)
	tw.WriteHeader(&tar.Header{Name: "oci-layout", Typeflag: tar.TypeReg, Mode: 0o644, Size: 2})
	tw.Write([]byte("{}"))
	tw.Close()
	archive := filepath.Join(src, "inflating.tar.gz")
	out, err := os.Create(archive)
	if err != nil {
		t.Fatal(err)
	}
	out.Write(member(head.Bytes()))
	zerosMember := member(make([]byte, chunk))
	for range n {
		out.Write(zerosMember)
	}
	out.Write(member(tail.Bytes()))
	out.Close()

	start := time.Now()
	_, err = f.s.Import(context.Background(), "inflating", archive)
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("the import took %v", d.Round(time.Second))
	}
	imageError(t, err, true, "too large")
	f.tmpEmpty()
}

// TestImportNamesWhatItUnpacked: another store over the directory evicts
// whatever it may the whole time (its cap is one byte), as a server's
// pulls do when the store is over its cap; every import still leaves its
// name on an image in the store, though the image has no name for a
// moment between its unpack and its naming.
func TestImportNamesWhatItUnpacked(t *testing.T) {
	f := newFixture(t, Options{})
	other, err := Open(f.s.dir, Options{MaxBytes: 1})
	if err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for !stop.Load() {
			other.evict()
		}
	}()
	defer func() { stop.Store(true); <-done }()
	for i := range 10 {
		name := fmt.Sprintf("n%d", i)
		d, err := f.importImage(name, goodImage(t, name))
		if err != nil {
			t.Fatal(err)
		}
		if !f.s.has(d) {
			t.Errorf("import %d: %s is named but not in the store", i, d)
		}
	}
}

// TestDockerArchiveEntriesBounded: the docker-archive check keeps a header
// per entry, so an archive of more entries than an image may have is
// refused before it is read further.
func TestDockerArchiveEntriesBounded(t *testing.T) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for i := range 10 {
		tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("e%d", i), Typeflag: tar.TypeReg, Mode: 0o644})
	}
	tw.Close()
	archive := filepath.Join(t.TempDir(), "many.tar")
	if err := os.WriteFile(archive, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := checkDockerArchive(archive, 1<<20, 10); err != nil {
		t.Errorf("10 entries, 10 allowed: %v", err)
	}
	if err := checkDockerArchive(archive, 1<<20, 9); err == nil || !strings.Contains(err.Error(), "more than 9 entries") {
		t.Errorf("10 entries, 9 allowed: %v", err)
	}
}

// TestPullHugeManifestRefused: a registry that answers a manifest with
// more than maxMeta bytes (declared, or streamed without a length) is
// refused at maxMeta, not read on into memory.
func TestPullHugeManifestRefused(t *testing.T) {
	const size = 64 << 20
	man, _ := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     types.OCIManifestSchema1,
		"config":        map[string]any{"mediaType": types.OCIConfigJSON, "digest": "sha256:" + strings.Repeat("ab", 32), "size": 2},
		"layers":        []any{},
	})
	// Valid JSON whatever its length: spaces after the object.
	h := sha256.New()
	h.Write(man)
	io.Copy(h, io.LimitReader(spaces{}, size-int64(len(man))))
	mdigest := "sha256:" + hex.EncodeToString(h.Sum(nil))
	for _, declared := range []bool{true, false} {
		f := newFixture(t, Options{})
		var sent atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch {
			case r.URL.Path == "/v2/":
			case strings.HasSuffix(r.URL.Path, "/manifests/"+mdigest):
				w.Header().Set("Content-Type", string(types.OCIManifestSchema1))
				w.Header().Set("Docker-Content-Digest", mdigest)
				if declared {
					w.Header().Set("Content-Length", fmt.Sprint(size))
				}
				if r.Method == http.MethodHead {
					return
				}
				n, _ := io.Copy(w, io.MultiReader(bytes.NewReader(man), io.LimitReader(spaces{}, size-int64(len(man)))))
				sent.Add(n)
			default:
				http.NotFound(w, r)
			}
		}))
		ref := strings.TrimPrefix(srv.URL, "http://") + "/test/big@" + mdigest
		_, err := f.s.Pull(context.Background(), ref)
		srv.Close()
		imageError(t, err, true, "manifest")
		if err != nil && !strings.Contains(err.Error(), fmt.Sprint(maxMeta)) {
			t.Errorf("declared %v: %v; want the bound named", declared, err)
		}
		// What the connection's buffers hold beyond the bound may have
		// been sent; not the rest.
		if n := sent.Load(); n > 4*maxMeta {
			t.Errorf("declared %v: the registry sent %d bytes of the manifest", declared, n)
		}
		f.tmpEmpty()
	}
}

type spaces struct{}

func (spaces) Read(b []byte) (int, error) {
	for i := range b {
		b[i] = ' '
	}
	return len(b), nil
}

// TestImportDockerArchiveLinkChain: a docker-archive whose layer is named
// through a long chain of links (which its reader would follow by reading
// the archive through once per link) is refused before it is read.
func TestImportDockerArchiveLinkChain(t *testing.T) {
	f := newFixture(t, Options{})
	img := goodImage(t, "chain")
	var orig bytes.Buffer
	ref, _ := name.ParseReference("example.test/img:1")
	if err := tarball.Write(ref, img, &orig); err != nil {
		t.Fatal(err)
	}
	// The archive's manifest, its layer named through the chain.
	tr := tar.NewReader(bytes.NewReader(orig.Bytes()))
	var manifest []map[string]any
	var ents []ent
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(tr)
		if h.Name == "manifest.json" {
			if err := json.Unmarshal(body, &manifest); err != nil {
				t.Fatal(err)
			}
			continue
		}
		ents = append(ents, ent{name: h.Name, typ: tar.TypeReg, mode: 0o644, body: string(body)})
	}
	const links = 300
	layers := manifest[0]["Layers"].([]any)
	last := layers[0].(string)
	layers[0] = "chain/0"
	for i := range links - 1 {
		ents = append(ents, symlink(fmt.Sprint("chain/", i), fmt.Sprint(i+1)))
	}
	ents = append(ents, symlink(fmt.Sprint("chain/", links-1), "../"+last))
	mj, _ := json.Marshal(manifest)
	ents = append([]ent{file("manifest.json", string(mj))}, ents...)
	src := filepath.Join(f.base, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(src, "chain.tar")
	if err := os.WriteFile(archive, tarBytes(t, ents...), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := f.s.Import(context.Background(), "chain", archive)
	imageError(t, err, true, "chain of more than")
	f.tmpEmpty()
}
