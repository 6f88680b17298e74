//go:build linux

package image

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/compression"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/airlock-sandbox/airlock/internal/statedir"
	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
)

// ent is one tar entry of a crafted layer.
type ent struct {
	name, link string
	typ        byte
	mode       int64
	body       string
	size       int64 // header size when body is empty and size is set
}

func file(name, body string) ent { return ent{name: name, typ: tar.TypeReg, mode: 0o644, body: body} }
func dir(name string) ent        { return ent{name: name, typ: tar.TypeDir, mode: 0o755} }
func symlink(name, to string) ent {
	return ent{name: name, typ: tar.TypeSymlink, link: to, mode: 0o777}
}
func hardlink(name, to string) ent { return ent{name: name, typ: tar.TypeLink, link: to, mode: 0o644} }
func whiteout(name string) ent     { return file(name, "") }
func bigFile(name string, n int64) ent {
	return ent{name: name, typ: tar.TypeReg, mode: 0o644, size: n}
}

var layerTime = time.Unix(1700000000, 0)

// tarBytes writes entries as a tar stream. An entry with size and no body
// gets only its header, as a hostile stream would.
func tarBytes(t testing.TB, ents ...ent) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: e.mode, Size: int64(len(e.body)), ModTime: layerTime, Format: tar.FormatPAX}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if e.size > 0 {
			h.Size = e.size
			if err := tw.WriteHeader(h); err != nil {
				t.Fatal(err)
			}
			return buf.Bytes() // the stream ends inside the entry
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func layerOf(t testing.TB, ents ...ent) v1.Layer {
	b := tarBytes(t, ents...)
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// imageOf builds a linux/amd64 image of layers with env.
func imageOf(t testing.TB, env []string, layers ...v1.Layer) v1.Image {
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config.Env = env
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func digestOf(t testing.TB, img v1.Image) string {
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

// fixture is a store beside a canary directory nothing may touch.
type fixture struct {
	t      *testing.T
	s      *Store
	base   string
	canary string
}

func newFixture(t *testing.T, opts Options) *fixture {
	base := t.TempDir()
	canary := filepath.Join(base, "canary")
	if err := os.Mkdir(canary, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(canary, "keep"), []byte("canary"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := Open(filepath.Join(base, "store"), opts)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, s: s, base: base, canary: canary}
	t.Cleanup(f.checkCanary)
	return f
}

// checkCanary fails if anything was written next to the store.
func (f *fixture) checkCanary() {
	f.t.Helper()
	ents, _ := os.ReadDir(f.base)
	for _, e := range ents {
		if e.Name() != "store" && e.Name() != "canary" && e.Name() != "src" {
			f.t.Errorf("written outside the store: %s", e.Name())
		}
	}
	ents, _ = os.ReadDir(f.canary)
	if len(ents) != 1 {
		f.t.Errorf("canary directory changed: %d entries", len(ents))
	}
	if b, _ := os.ReadFile(filepath.Join(f.canary, "keep")); string(b) != "canary" {
		f.t.Errorf("canary file changed: %q", b)
	}
}

// tmpEmpty fails if work in progress was left behind.
func (f *fixture) tmpEmpty() {
	f.t.Helper()
	ents, _ := os.ReadDir(filepath.Join(f.s.dir, "tmp"))
	for _, e := range ents {
		f.t.Errorf("left in tmp/: %s", e.Name())
	}
}

// importImage writes img as an OCI layout and imports it as name.
func (f *fixture) importImage(name string, img v1.Image) (string, error) {
	src := filepath.Join(f.base, "src", name)
	os.RemoveAll(src)
	p, err := layout.Write(src, empty.Index)
	if err != nil {
		f.t.Fatal(err)
	}
	if err := p.AppendImage(img); err != nil {
		f.t.Fatal(err)
	}
	return f.s.Import(context.Background(), name, src)
}

func (f *fixture) acquire(ref string) (*Image, func()) {
	f.t.Helper()
	img, release, err := f.s.Acquire(context.Background(), ref)
	if err != nil {
		f.t.Fatalf("Acquire(%q): %v", ref, err)
	}
	f.t.Cleanup(release)
	return img, release
}

func readFile(t *testing.T, root, p string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, p))
	if err != nil {
		t.Fatalf("reading %s: %v", p, err)
	}
	return string(b)
}

func absent(t *testing.T, root, p string) {
	t.Helper()
	if _, err := os.Lstat(filepath.Join(root, p)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s exists (%v)", p, err)
	}
}

func imageError(t *testing.T, err error, invalid bool, want string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T), want *image.Error", err, err)
	}
	if e.Invalid != invalid {
		t.Errorf("Invalid = %v, want %v (%v)", e.Invalid, invalid, err)
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not say %q", err, want)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("error is not one line: %q", err)
	}
}

func goodImage(t testing.TB, marker string) v1.Image {
	return imageOf(t, []string{"MARKER=" + marker},
		layerOf(t, dir("etc"), file("etc/os-release", "ID="+marker+"\n"), symlink("bin", "usr/bin"), dir("usr/bin"), file("usr/bin/tool", "#!/bin/sh\n")))
}

func TestImportLayoutAndAcquire(t *testing.T) {
	var mu sync.Mutex
	var events []Event
	f := newFixture(t, Options{Progress: func(ev Event) { mu.Lock(); events = append(events, ev); mu.Unlock() }})
	img := goodImage(t, "alpha")
	d, err := f.importImage("python", img)
	if err != nil {
		t.Fatal(err)
	}
	if d != digestOf(t, img) {
		t.Fatalf("digest %s, want %s", d, digestOf(t, img))
	}
	got, _ := f.acquire("") // the default name is python
	if got.Digest != d || got.Ref != "python" || got.IsHost() {
		t.Fatalf("got %+v", got)
	}
	if s := readFile(t, got.Root, "etc/os-release"); s != "ID=alpha\n" {
		t.Errorf("os-release %q", s)
	}
	if fi, err := os.Stat(filepath.Join(got.Root, "etc/os-release")); err != nil || !fi.ModTime().Equal(layerTime) {
		t.Errorf("os-release mtime not kept: %v", fi.ModTime())
	}
	mu.Lock()
	if n := len(events); n == 0 || events[n-1].Phase != "done" || events[n-1].Done != events[n-1].Total || events[0].Layers != 1 {
		t.Errorf("progress events %+v", events)
	}
	mu.Unlock()
	for _, p := range MountPoints {
		fi, err := os.Lstat(filepath.Join(got.Root, p))
		if err != nil || fi.IsDir() != strings.HasSuffix(p, "/") {
			t.Errorf("mount point /%s: %v", p, err)
		}
	}
	if l, err := os.Readlink(filepath.Join(got.Root, "bin")); err != nil || l != "usr/bin" {
		t.Errorf("bin link %q %v", l, err)
	}
	if v, ok := got.Config.Getenv("MARKER"); !ok || v != "alpha" {
		t.Errorf("Env %v", got.Config.Env)
	}
	byDigest, _ := f.acquire("python@" + d)
	_ = byDigest
	f.tmpEmpty()

	_, _, err = f.s.Acquire(context.Background(), "ruby")
	imageError(t, err, true, "unknown image name")
	_, _, err = f.s.Acquire(context.Background(), Host)
	imageError(t, err, true, "host view is not enabled")

	// A second store over the same directory sees the name.
	s2, err := Open(f.s.dir, Options{AllowHost: true})
	if err != nil {
		t.Fatal(err)
	}
	img2, rel, err := s2.Acquire(context.Background(), "python")
	if err != nil || img2.Digest != d {
		t.Fatalf("second store: %v %v", img2, err)
	}
	rel()
	h, rel, err := s2.Acquire(context.Background(), Host)
	if err != nil || !h.IsHost() || h.Digest != Host {
		t.Fatalf("host: %v %v", h, err)
	}
	rel()
	if s2.unpacks.Load() != 0 {
		t.Errorf("second store unpacked again")
	}
}

func TestImportDockerArchiveAndOCITar(t *testing.T) {
	f := newFixture(t, Options{})
	img := goodImage(t, "docker")
	src := filepath.Join(f.base, "src")
	os.MkdirAll(src, 0o755)
	ref, _ := name.ParseReference("example.test/img:1")
	archive := filepath.Join(src, "docker.tar")
	if err := tarball.WriteToFile(archive, ref, img); err != nil {
		t.Fatal(err)
	}
	d, err := f.s.Import(context.Background(), "minimal", archive)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := f.acquire("minimal")
	if got.Digest != d {
		t.Errorf("digest %s, want %s", got.Digest, d)
	}
	if s := readFile(t, got.Root, "etc/os-release"); s != "ID=docker\n" {
		t.Errorf("os-release %q", s)
	}

	// An OCI layout, as a tarball.
	img2 := goodImage(t, "ocitar")
	lay := filepath.Join(src, "lay")
	p, err := layout.Write(lay, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img2); err != nil {
		t.Fatal(err)
	}
	ociTar := filepath.Join(src, "oci.tar")
	out, err := os.Create(ociTar)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(out)
	if err := tw.AddFS(os.DirFS(lay)); err != nil {
		t.Fatal(err)
	}
	tw.Close()
	out.Close()
	d2, err := f.s.Import(context.Background(), "oci", ociTar)
	if err != nil {
		t.Fatal(err)
	}
	if d2 != digestOf(t, img2) {
		t.Errorf("digest %s, want %s", d2, digestOf(t, img2))
	}
	got2, _ := f.acquire("oci")
	if s := readFile(t, got2.Root, "etc/os-release"); s != "ID=ocitar\n" {
		t.Errorf("os-release %q", s)
	}
	_, err = f.s.Import(context.Background(), "bad/name", ociTar)
	imageError(t, err, true, "malformed name")
	f.tmpEmpty()
}

func TestWhiteouts(t *testing.T) {
	f := newFixture(t, Options{})
	img := imageOf(t, nil,
		layerOf(t, file("a/f1", "1"), file("a/f2", "2"), file("b/g", "g"), dir("b/sub"), file("b/sub/x", "x"), file("c/h", "h")),
		layerOf(t, whiteout("a/.wh.f1"), file("b/new", "n"), whiteout("b/.wh..wh..opq"), whiteout(".wh.c"), file("c2", "c2")),
	)
	if _, err := f.importImage("w", img); err != nil {
		t.Fatal(err)
	}
	got, _ := f.acquire("w")
	absent(t, got.Root, "a/f1")
	readFile(t, got.Root, "a/f2")
	absent(t, got.Root, "b/g")
	absent(t, got.Root, "b/sub")
	if s := readFile(t, got.Root, "b/new"); s != "n" {
		t.Errorf("b/new %q", s)
	}
	absent(t, got.Root, "c")
	absent(t, got.Root, "a/.wh.f1")
	absent(t, got.Root, "b/.wh..wh..opq")
	readFile(t, got.Root, "c2")
}

// TestHostile feeds layers that try to leave the root or smuggle
// privileges: each is refused or neutralised, nothing lands outside the
// store, nothing is left in tmp/, and a good image still works after.
func TestHostile(t *testing.T) {
	f := newFixture(t, Options{MaxBytes: 64 << 20})
	canary := f.canary
	setuid := ent{name: "usr/bin/su", typ: tar.TypeReg, mode: 0o4755 | 0o2000 | 0o1000, body: "x"}
	cases := []struct {
		name    string
		ents    []ent
		refuse  string // the error names this; empty: neutralised
		invalid bool
		check   func(t *testing.T, root string)
	}{
		{name: "dotdot", ents: []ent{file("../x", "x")}, refuse: "escapes the root", invalid: true},
		{name: "dotdot-deep", ents: []ent{file("a/../../canary/x", "x")}, refuse: "escapes the root", invalid: true},
		{name: "absolute", ents: []ent{file(canary+"/abs", "x")}, check: func(t *testing.T, root string) {
			readFile(t, root, canary+"/abs")
		}},
		{name: "symlink-root-then-file", ents: []ent{symlink("esc", "/"), file("esc"+canary+"/pwned", "x")}, refuse: "symlink", invalid: true},
		{name: "symlink-canary-then-file", ents: []ent{symlink("esc", canary), file("esc/pwned", "x")}, refuse: "symlink", invalid: true},
		{name: "symlink-dotdot-then-dir", ents: []ent{symlink("up", "../../../.."), dir("up/newdir")}, refuse: "symlink", invalid: true},
		{name: "hardlink-host", ents: []ent{hardlink("pw", "/etc/passwd")}, refuse: "hard link", invalid: true},
		{name: "hardlink-canary", ents: []ent{hardlink("k", canary+"/keep")}, refuse: "hard link", invalid: true},
		{name: "hardlink-through-symlink", ents: []ent{symlink("l", "/etc"), hardlink("h", "l/passwd")}, refuse: "hard link", invalid: true},
		{name: "hardlink-dotdot", ents: []ent{hardlink("h", "../canary/keep")}, refuse: "hard link", invalid: true},
		{name: "hardlink-to-symlink", ents: []ent{symlink("l", canary+"/keep"), hardlink("h", "l")}, refuse: "hard link", invalid: true},
		{name: "hardlink-to-dir", ents: []ent{dir("d"), hardlink("h", "d")}, refuse: "hard link", invalid: true},
		{name: "whiteout-dotdot", ents: []ent{dir("a"), whiteout("a/.wh...")}, refuse: "whiteout", invalid: true},
		{name: "whiteout-dot", ents: []ent{dir("a"), whiteout("a/.wh..")}, refuse: "whiteout", invalid: true},
		{name: "whiteout-through-symlink", ents: []ent{symlink("c", canary), whiteout("c/.wh.keep")}, refuse: "symlink", invalid: true},
		{name: "opaque-through-symlink", ents: []ent{symlink("c", canary), whiteout("c/.wh..wh..opq")}, refuse: "symlink", invalid: true},
		{name: "hardlink-inside", ents: []ent{file("a", "a"), hardlink("b", "a")}, check: func(t *testing.T, root string) {
			if s := readFile(t, root, "b"); s != "a" {
				t.Errorf("b %q", s)
			}
		}},
		{name: "setuid", ents: []ent{setuid}, check: func(t *testing.T, root string) {
			fi, err := os.Stat(filepath.Join(root, "usr/bin/su"))
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode()&(os.ModeSetuid|os.ModeSetgid|os.ModeSticky) != 0 || fi.Mode().Perm() != 0o755 {
				t.Errorf("mode %v", fi.Mode())
			}
		}},
		{name: "others-write", ents: []ent{{name: "var/tmp", typ: tar.TypeDir, mode: 0o1777}, {name: "usr/bin/tool", typ: tar.TypeReg, mode: 0o777, body: "x"}, {name: "etc/shared", typ: tar.TypeReg, mode: 0o666, body: "x"}}, check: func(t *testing.T, root string) {
			// The store is readable by every local account: what the image
			// lets anyone write there, anyone on the host could plant or
			// change under every sandbox of the image.
			for p, want := range map[string]os.FileMode{"var/tmp": 0o755, "usr/bin/tool": 0o755, "etc/shared": 0o644} {
				fi, err := os.Lstat(filepath.Join(root, p))
				if err != nil {
					t.Fatal(err)
				}
				if fi.Mode().Perm() != want || fi.Mode()&os.ModeSticky != 0 {
					t.Errorf("%s: mode %v, want %v", p, fi.Mode(), want)
				}
			}
		}},
		{name: "devices", ents: []ent{{name: "dev/mem", typ: tar.TypeChar, mode: 0o666}, {name: "dev/sda", typ: tar.TypeBlock, mode: 0o666}, {name: "fifo", typ: tar.TypeFifo, mode: 0o666}, file("ok", "ok")}, check: func(t *testing.T, root string) {
			absent(t, root, "dev/mem")
			absent(t, root, "dev/sda")
			absent(t, root, "fifo")
			readFile(t, root, "ok")
		}},
		{name: "long-name", ents: []ent{file(strings.Repeat("a/", 3000)+"x", "x")}, refuse: "bytes", invalid: true},
		// Names the file system cannot hold are the image's fault, not the
		// store's condition.
		{name: "long-element-file", ents: []ent{file(strings.Repeat("f", 300), "x")}, refuse: "file name too long", invalid: true},
		{name: "long-element-dir", ents: []ent{dir(strings.Repeat("d", 300))}, refuse: "file name too long", invalid: true},
		{name: "long-element-on-the-way", ents: []ent{file(strings.Repeat("d", 300)+"/x", "x")}, refuse: "file name too long", invalid: true},
		{name: "long-element-symlink", ents: []ent{symlink(strings.Repeat("l", 300), "x")}, refuse: "file name too long", invalid: true},
		{name: "long-element-hardlink", ents: []ent{file("a", "a"), hardlink(strings.Repeat("h", 300), "a")}, refuse: "file name too long", invalid: true},
		{name: "long-element-whiteout", ents: []ent{whiteout(".wh." + strings.Repeat("w", 300))}, refuse: "file name too long", invalid: true},
		{name: "sparse-10G", ents: []ent{bigFile("big", 10<<30)}, refuse: "too large", invalid: true},
		{name: "mount-points-through-links", ents: []ent{symlink("etc", canary), symlink(".airlock", canary), symlink("tmp", canary), file("ok", "ok")}, check: func(t *testing.T, root string) {
			for _, l := range []string{"etc", ".airlock", "tmp"} {
				if fi, err := os.Lstat(filepath.Join(root, l)); err != nil || fi.Mode()&os.ModeSymlink == 0 {
					t.Errorf("%s is no longer the image's link: %v", l, err)
				}
			}
			if fi, err := os.Stat(filepath.Join(root, "scratch")); err != nil || !fi.IsDir() {
				t.Errorf("mount point /scratch: %v", err)
			}
		}},
		{name: "file-replaces-symlink", ents: []ent{symlink("t", canary+"/keep"), file("t", "mine")}, check: func(t *testing.T, root string) {
			if s := readFile(t, root, "t"); s != "mine" {
				t.Errorf("t %q", s)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			img := imageOf(t, nil, layerOf(t, c.ents...))
			d, err := f.importImage("h-"+strings.ToLower(c.name), img)
			if c.refuse != "" {
				imageError(t, err, c.invalid, c.refuse)
				if f.s.has(digestOf(t, img)) {
					t.Errorf("refused image is in the store")
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				got, rel, err := f.s.Acquire(context.Background(), d)
				if err != nil {
					t.Fatal(err)
				}
				c.check(t, got.Root)
				rel()
			}
			f.tmpEmpty()
			f.checkCanary()
			good := goodImage(t, "after-"+c.name)
			if _, err := f.importImage("good", good); err != nil {
				t.Fatalf("a good image after: %v", err)
			}
			got, rel, err := f.s.Acquire(context.Background(), "good")
			if err != nil {
				t.Fatal(err)
			}
			if s := readFile(t, got.Root, "etc/os-release"); s != "ID=after-"+c.name+"\n" {
				t.Errorf("os-release %q", s)
			}
			rel()
		})
	}
	if _, err := os.Stat("/pw"); err == nil {
		t.Errorf("/pw exists")
	}
}

// endless is a layer whose stream never ends: a tar of ever more files.
type endless struct{}

func (endless) Digest() (v1.Hash, error) {
	return v1.NewHash("sha256:" + strings.Repeat("ab", 32))
}
func (endless) DiffID() (v1.Hash, error) {
	return v1.NewHash("sha256:" + strings.Repeat("cd", 32))
}
func (endless) Compressed() (io.ReadCloser, error)   { return io.NopCloser(&endlessTar{}), nil }
func (endless) Uncompressed() (io.ReadCloser, error) { return io.NopCloser(&endlessTar{}), nil }
func (endless) Size() (int64, error)                 { return 1 << 62, nil }
func (endless) MediaType() (types.MediaType, error)  { return types.OCIUncompressedLayer, nil }

type endlessTar struct {
	n   int
	buf bytes.Buffer
}

func (e *endlessTar) Read(p []byte) (int, error) {
	if e.buf.Len() == 0 {
		e.n++
		tw := tar.NewWriter(&e.buf)
		body := make([]byte, 64<<10)
		tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("f%d", e.n), Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body))})
		tw.Write(body)
		tw.Flush()
	}
	return e.buf.Read(p)
}

func TestEndlessLayerStopsAtCap(t *testing.T) {
	f := newFixture(t, Options{MaxBytes: 8 << 20})
	img, err := mutate.AppendLayers(empty.Image, endless{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.s.ensure(context.Background(), "endless", img, "", nil)
	imageError(t, wrap("endless", err), true, "too large")
	f.tmpEmpty()
	if ents, _ := os.ReadDir(filepath.Join(f.s.dir, "images")); len(ents) != 0 {
		t.Errorf("images left: %d", len(ents))
	}
}

// corruptLayout imports an image whose layer blob is damaged by damage.
func corruptLayout(t *testing.T, f *fixture, n string, damage func(p string)) error {
	img := imageOf(t, nil, layerOf(t, file("data", strings.Repeat("payload ", 4096))))
	src := filepath.Join(f.base, "src", n)
	p, err := layout.Write(src, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	ls, _ := img.Layers()
	ld, _ := ls[0].Digest()
	damage(filepath.Join(src, "blobs", "sha256", ld.Hex))
	_, err = f.s.Import(context.Background(), n, src)
	return err
}

func TestCorruptAndTruncatedBlobs(t *testing.T) {
	f := newFixture(t, Options{})
	err := corruptLayout(t, f, "corrupt", func(p string) {
		b, _ := os.ReadFile(p)
		b[len(b)/2] ^= 0xff
		os.WriteFile(p, b, 0o644)
	})
	imageError(t, err, false, "corrupt blob")
	err = corruptLayout(t, f, "truncated", func(p string) {
		fi, _ := os.Stat(p)
		os.Truncate(p, fi.Size()/2)
	})
	imageError(t, err, false, "truncated blob")
	err = corruptLayout(t, f, "longer", func(p string) {
		fh, _ := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
		fh.Write([]byte("trailing"))
		fh.Close()
	})
	imageError(t, err, false, "corrupt blob")
	f.tmpEmpty()
	if _, err := f.importImage("good", goodImage(t, "good")); err != nil {
		t.Fatal(err)
	}
	got, _ := f.acquire("good")
	readFile(t, got.Root, "etc/os-release")
}

// serve pushes img to an in-process registry on loopback and returns the
// repository reference.
func serve(t *testing.T, imgs map[string]v1.Image) string {
	srv := httptest.NewServer(registry.New(registry.Logger(nilLogger())))
	t.Cleanup(srv.Close)
	repo := strings.TrimPrefix(srv.URL, "http://") + "/test/img"
	for tag, img := range imgs {
		ref, err := name.ParseReference(repo + ":" + tag)
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.Write(ref, img); err != nil {
			t.Fatal(err)
		}
	}
	return repo
}

func TestPullPinnedConcurrentOnce(t *testing.T) {
	f := newFixture(t, Options{})
	img := goodImage(t, "pulled")
	repo := serve(t, map[string]v1.Image{"v1": img})
	ref := repo + "@" + digestOf(t, img)
	// A second Store over the directory stands for another process: only
	// the file locks keep the two from unpacking twice.
	other, err := Open(f.s.dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		s := f.s
		if i%2 == 1 {
			s = other
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, rel, err := s.Acquire(context.Background(), ref)
			if err == nil {
				if got.Digest != digestOf(t, img) {
					err = fmt.Errorf("digest %s", got.Digest)
				}
				rel()
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := f.s.unpacks.Load() + other.unpacks.Load(); n != 1 {
		t.Errorf("unpacked %d times, want 1", n)
	}
	got, _ := f.acquire(ref)
	if s := readFile(t, got.Root, "etc/os-release"); s != "ID=pulled\n" {
		t.Errorf("os-release %q", s)
	}

	// A tag is refused unless allowed.
	_, _, err = f.s.Acquire(context.Background(), repo+":v1")
	imageError(t, err, true, "not pinned by digest")
	_, err = f.s.Pull(context.Background(), repo+":v1")
	imageError(t, err, true, "not pinned by digest")
	tags, err := Open(f.s.dir, Options{AllowTags: true})
	if err != nil {
		t.Fatal(err)
	}
	got2, rel, err := tags.Acquire(context.Background(), repo+":v1")
	if err != nil || got2.Digest != digestOf(t, img) {
		t.Fatalf("tag: %v %v", got2, err)
	}
	rel()

	// Unknown digest in the registry: the job's fault.
	missing := repo + "@sha256:" + strings.Repeat("0", 64)
	_, _, err = f.s.Acquire(context.Background(), missing)
	imageError(t, err, true, "not found")

	infos, err := f.s.List()
	if err != nil || len(infos) != 1 || infos[0].Digest != digestOf(t, img) || len(infos[0].Refs) == 0 {
		t.Errorf("List: %+v %v", infos, err)
	}
	f.tmpEmpty()
}

func TestPullIndexSelectsAmd64(t *testing.T) {
	f := newFixture(t, Options{})
	amd := goodImage(t, "amd64")
	arm := imageOf(t, nil, layerOf(t, file("etc/os-release", "ID=arm\n")))
	idx := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: arm, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64"}}},
		mutate.IndexAddendum{Add: amd, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}},
	)
	srv := httptest.NewServer(registry.New(registry.Logger(nilLogger())))
	t.Cleanup(srv.Close)
	repo := strings.TrimPrefix(srv.URL, "http://") + "/test/multi"
	tagRef, _ := name.ParseReference(repo + ":latest")
	if err := remote.WriteIndex(tagRef, idx); err != nil {
		t.Fatal(err)
	}
	id, _ := idx.Digest()
	ref := repo + "@" + id.String()
	d, err := f.s.Pull(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	if d != digestOf(t, amd) {
		t.Fatalf("pulled %s, want the amd64 image %s", d, digestOf(t, amd))
	}
	srv.Close() // the index's digest now resolves from the store alone
	got, _ := f.acquire(ref)
	if s := readFile(t, got.Root, "etc/os-release"); s != "ID=amd64\n" {
		t.Errorf("os-release %q", s)
	}
}

func randomLayer(t testing.TB, n int) v1.Layer {
	b := make([]byte, n)
	rand.Read(b)
	return layerOf(t, file("blob", string(b)))
}

func TestEvictionLRUNeverHeld(t *testing.T) {
	f := newFixture(t, Options{MaxBytes: 5 << 20 / 2}) // room for two 1 MiB images
	imgs := map[string]v1.Image{}
	for _, tag := range []string{"a", "b", "c", "d"} {
		imgs[tag] = imageOf(t, nil, randomLayer(t, 1<<20))
	}
	repo := serve(t, imgs)
	ref := func(tag string) string { return repo + "@" + digestOf(t, imgs[tag]) }

	_, relA := f.acquire(ref("a")) // held throughout
	_, relB, err := f.s.Acquire(context.Background(), ref("b"))
	if err != nil {
		t.Fatal(err)
	}
	relB()
	named := imageOf(t, nil, randomLayer(t, 1<<20))
	if _, err := f.importImage("named", named); err != nil {
		t.Fatal(err)
	}
	_, relC := f.acquire(ref("c"))
	relC()
	if !f.s.has(digestOf(t, imgs["a"])) {
		t.Fatal("held image a was evicted")
	}
	if !f.s.has(digestOf(t, named)) {
		t.Fatal("named image was evicted")
	}
	if f.s.has(digestOf(t, imgs["b"])) {
		t.Error("least recently used b was kept over the cap")
	}
	relA()
	_, relD := f.acquire(ref("d"))
	relD()
	if f.s.has(digestOf(t, imgs["a"])) && f.s.has(digestOf(t, imgs["c"])) {
		t.Error("nothing evicted once a was released")
	}

	// Remove refuses a held image, then removes it.
	got, rel := f.acquire("named")
	err = f.s.Remove(context.Background(), "named")
	imageError(t, err, false, "in use")
	rel()
	if err := f.s.Remove(context.Background(), "named"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(got.Root); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("removed image's root still there: %v", err)
	}
	_, _, err = f.s.Acquire(context.Background(), "named")
	imageError(t, err, true, "unknown image name")
	f.tmpEmpty()
}

func TestDerive(t *testing.T) {
	var mu sync.Mutex
	var events []Event
	f := newFixture(t, Options{Progress: func(ev Event) {
		if ev.Phase == "derive" || ev.Phase == "derived" {
			mu.Lock()
			events = append(events, ev)
			mu.Unlock()
		}
	}})
	if _, err := f.importImage("python", goodImage(t, "d")); err != nil {
		t.Fatal(err)
	}
	img, _ := f.acquire("python")
	boom := errors.New("boom")
	_, err := f.s.Derive(context.Background(), img, "disk", func(dir string) error {
		os.WriteFile(filepath.Join(dir, "half"), []byte("x"), 0o644)
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Derive error %v, want boom", err)
	}
	f.tmpEmpty()
	if _, err := os.Stat(filepath.Join(f.s.imageDir(img.Digest), "derived", "disk")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("failed build left an artefact")
	}
	var wg sync.WaitGroup
	dirs := make([]string, 6)
	for i := range dirs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := f.s.Derive(context.Background(), img, "disk", func(dir string) error {
				return os.WriteFile(filepath.Join(dir, "disk.img"), []byte("disk"), 0o644)
			})
			if err != nil {
				t.Error(err)
			}
			dirs[i] = d
		}()
	}
	wg.Wait()
	if n := f.s.builds.Load(); n != 1 {
		t.Errorf("built %d times, want 1", n)
	}
	for _, d := range dirs {
		if d != dirs[0] {
			t.Errorf("dirs differ: %v", dirs)
		}
	}
	if s := readFile(t, dirs[0], "disk.img"); s != "disk" {
		t.Errorf("artefact %q", s)
	}
	// The failed build and the one that succeeded each said it started;
	// only the second said it was done.
	mu.Lock()
	if len(events) != 3 || events[0].Phase != "derive" || events[1].Phase != "derive" || events[2].Phase != "derived" || events[2].Kind != "disk" || events[2].Took <= 0 {
		t.Errorf("progress events %+v", events)
	}
	mu.Unlock()
	_, err = f.s.Derive(context.Background(), img, "../x", func(string) error { return nil })
	imageError(t, err, false, "malformed artefact kind")
}

func TestOpenCleansInterruptedWork(t *testing.T) {
	f := newFixture(t, Options{})
	tmp := filepath.Join(f.s.dir, "tmp")
	os.MkdirAll(filepath.Join(tmp, "deadbeef", "root", "etc"), 0o755)
	os.WriteFile(filepath.Join(tmp, "deadbeef.lock"), nil, 0o644)
	os.WriteFile(filepath.Join(tmp, "names-123"), []byte("{"), 0o644)
	// A directory a live process is still filling stays.
	live, done, err := f.s.tempDir()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(f.s.dir, Options{}); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(tmp)
	if len(ents) != 2 {
		t.Errorf("tmp/ after Open: %v", ents)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("live work removed: %v", err)
	}
	done()
	f.tmpEmpty()

	// A cancelled unpack leaves nothing.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = f.importImageCtx(ctx, "cancelled", imageOf(t, nil, randomLayer(t, 1<<20)))
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled import: %v", err)
	}
	f.tmpEmpty()
	if ents, _ := os.ReadDir(filepath.Join(f.s.dir, "images")); len(ents) != 0 {
		t.Errorf("images after a cancelled import: %d", len(ents))
	}
}

func (f *fixture) importImageCtx(ctx context.Context, name string, img v1.Image) (string, error) {
	src := filepath.Join(f.base, "src", name)
	p, err := layout.Write(src, empty.Index)
	if err != nil {
		f.t.Fatal(err)
	}
	if err := p.AppendImage(img); err != nil {
		f.t.Fatal(err)
	}
	return f.s.Import(ctx, name, src)
}

func TestZstdAndUncompressedLayers(t *testing.T) {
	f := newFixture(t, Options{})
	b1 := tarBytes(t, file("z/one", "zstd"))
	zl, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b1)), nil },
		tarball.WithCompression(compression.ZStd), tarball.WithMediaType(types.OCILayerZStd))
	if err != nil {
		t.Fatal(err)
	}
	if mt, _ := zl.MediaType(); mt != types.OCILayerZStd {
		t.Fatalf("media type %s", mt)
	}
	plain := static.NewLayer(tarBytes(t, file("z/three", "plain")), types.OCIUncompressedLayer)
	img := imageOf(t, nil, zl, layerOf(t, file("z/two", "gzip")), plain)
	if _, err := f.importImage("z", img); err != nil {
		t.Fatal(err)
	}
	got, _ := f.acquire("z")
	if s := readFile(t, got.Root, "z/one"); s != "zstd" {
		t.Errorf("z/one %q", s)
	}
	if s := readFile(t, got.Root, "z/two"); s != "gzip" {
		t.Errorf("z/two %q", s)
	}
	if s := readFile(t, got.Root, "z/three"); s != "plain" {
		t.Errorf("z/three %q", s)
	}
}

// authRegistry is an in-process registry on loopback behind a check of
// bearer tokens, as a private registry's: every /v2/ request needs
// "Authorization: Bearer <token>", and the token service at /token hands
// that token out for user:pass (basic auth) or refresh (an OAuth2
// refresh token). With no token it is anonymous. It records every
// Authorization header it is sent.
type authRegistry struct {
	srv  *httptest.Server
	repo string
	mu   sync.Mutex
	seen []string
}

func newAuthRegistry(t *testing.T, token, user, pass, refresh string, imgs map[string]v1.Image) *authRegistry {
	a := &authRegistry{}
	reg := registry.New(registry.Logger(nilLogger()))
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		if h := r.Header.Get("Authorization"); h != "" {
			a.seen = append(a.seen, h)
		}
		a.mu.Unlock()
		if r.URL.Path == "/token" {
			u, p, basic := r.BasicAuth()
			r.ParseForm()
			if !(basic && u == user && p == pass) && !(refresh != "" && r.PostForm.Get("refresh_token") == refresh) {
				http.Error(w, "bad credentials", http.StatusUnauthorized)
				return
			}
			json.NewEncoder(w).Encode(map[string]string{"token": token, "access_token": token})
			return
		}
		if token != "" && r.Header.Get("Authorization") != "Bearer "+token {
			w.Header().Set("WWW-Authenticate", `Bearer realm="`+a.srv.URL+`/token",service="airlock-test"`)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`)
			return
		}
		reg.ServeHTTP(w, r)
	}))
	t.Cleanup(a.srv.Close)
	a.repo = strings.TrimPrefix(a.srv.URL, "http://") + "/team/private"
	var auth authn.Authenticator = authn.Anonymous
	if token != "" {
		auth = &authn.Bearer{Token: token}
	}
	for tag, img := range imgs {
		ref, err := name.ParseReference(a.repo + ":" + tag)
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.Write(ref, img, remote.WithAuth(auth)); err != nil {
			t.Fatal(err)
		}
	}
	a.mu.Lock()
	a.seen = nil
	a.mu.Unlock()
	return a
}

// headers returns the Authorization headers sent since the last call.
func (a *authRegistry) headers() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	h := a.seen
	a.seen = nil
	return h
}

// writeAuthFile writes a docker config.json of auths, mode 0600.
func writeAuthFile(t *testing.T, auths map[string]map[string]string) string {
	data, err := json.Marshal(map[string]any{"auths": auths})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPullTokenAuth pulls from a registry that wants a bearer token: with
// the token, or with a user and password or a refresh token the token
// service exchanges for it, the image is pulled; with none or a wrong
// one, the error is one line naming the image and the registry (the job's
// fault without credentials, the operator's with refused ones); a
// credential goes to its own registry only; and a credentials file others
// may read, or that is not a config.json, is refused at Open.
func TestPullTokenAuth(t *testing.T) {
	img := goodImage(t, "private")
	const token, user, pass, refresh = "good-token", "robot", "s3cret", "refresh-me"
	priv := newAuthRegistry(t, token, user, pass, refresh, map[string]v1.Image{"v1": img})
	ref := priv.repo + "@" + digestOf(t, img)
	host := strings.TrimPrefix(priv.srv.URL, "http://")

	// An anonymous registry beside it, which must never see a credential.
	pubImg := goodImage(t, "public")
	pub := newAuthRegistry(t, "", "", "", "", map[string]v1.Image{"v1": pubImg})

	pull := func(opts Options, ref string) (string, error) {
		t.Helper()
		f := newFixture(t, opts)
		d, err := f.s.Pull(context.Background(), ref)
		f.tmpEmpty()
		return d, err
	}

	// No credentials: refused, the job's fault.
	_, err := pull(Options{}, ref)
	imageError(t, err, true, "registry "+host+" refused access (401 Unauthorized)")
	if !strings.Contains(err.Error(), "image "+ref+": ") {
		t.Errorf("error %q does not name the image", err)
	}

	// A wrong token: refused, the operator's fault, naming the file.
	wrong := writeAuthFile(t, map[string]map[string]string{host: {"registrytoken": "bad-token"}})
	_, err = pull(Options{AuthFile: wrong}, ref)
	imageError(t, err, false, "registry "+host+" refused the credentials for it in "+wrong+" (401 Unauthorized)")
	if h := priv.headers(); !slices.Contains(h, "Bearer bad-token") {
		t.Errorf("the wrong token was not sent (headers %q)", h)
	}

	// A wrong password for the token service.
	_, err = pull(Options{AuthFile: writeAuthFile(t, map[string]map[string]string{host: {"username": user, "password": "nope"}})}, ref)
	imageError(t, err, false, "refused the credentials")

	for what, entry := range map[string]map[string]string{
		"bearer token":       {"registrytoken": token},
		"user and password":  {"auth": base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))},
		"username, password": {"username": user, "password": pass},
		"refresh token":      {"identitytoken": refresh},
	} {
		// Keyed as docker login writes it for some registries: a URL.
		file := writeAuthFile(t, map[string]map[string]string{"https://" + host + "/v1/": entry})
		d, err := pull(Options{AuthFile: file}, ref)
		if err != nil || d != digestOf(t, img) {
			t.Errorf("%s: pulled %s, %v; want %s", what, d, err, digestOf(t, img))
		}
	}
	priv.headers()

	// A credential for the private registry is not sent to another one.
	good := writeAuthFile(t, map[string]map[string]string{host: {"registrytoken": token}})
	if _, err := pull(Options{AuthFile: good}, pub.repo+"@"+digestOf(t, pubImg)); err != nil {
		t.Errorf("anonymous registry with a credentials file for another: %v", err)
	}
	if h := pub.headers(); len(h) != 0 {
		t.Errorf("pulling from another registry sent it %q", h)
	}

	// Files Open refuses, in one line naming the file.
	loose := writeAuthFile(t, map[string]map[string]string{host: {"registrytoken": token}})
	if err := os.Chmod(loose, 0o644); err != nil {
		t.Fatal(err)
	}
	junk := filepath.Join(t.TempDir(), "junk.json")
	os.WriteFile(junk, []byte("registrytoken=x"), 0o600)
	empty := writeAuthFile(t, map[string]map[string]string{host: {}})
	for file, want := range map[string]string{
		loose:                              "mode 0644 lets group or others read it",
		junk:                               "not a docker config.json",
		empty:                              "holds no credential",
		filepath.Join(t.TempDir(), "none"): "no such file",
	} {
		_, err := Open(t.TempDir(), Options{AuthFile: file})
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), file) || strings.Contains(err.Error(), "\n") {
			t.Errorf("Open with credentials %s: %v; want one line saying %q", file, err, want)
		}
	}
}

// A store directory another user made is refused: its owner could swap
// an unpacked image for their own after it was checked.
func TestOpenRefusesForeignDir(t *testing.T) {
	_, err := Open(testenv.ForeignDir(t), Options{})
	if !statedir.IsRefused(err) {
		t.Errorf("a store in another user's directory: %v", err)
	}
}

// TestHostileEnvRefused: an image whose configuration's environment no
// program could be started with (a NUL byte, an entry or a whole over the
// kernel's bounds) is refused at import, in one line, as the image's
// fault; and one already in a store has such an entry left out.
func TestHostileEnvRefused(t *testing.T) {
	f := newFixture(t, Options{})
	layer := layerOf(t, file("etc/os-release", "ID=x\n"))
	for what, env := range map[string][]string{
		"a NUL byte":         {"PATH=/usr/bin", "X=a\x00LD_PRELOAD=/tmp/x.so"},
		"a long entry":       {"X=" + strings.Repeat("a", 128<<10)},
		"a long environment": slices.Repeat([]string{"X=" + strings.Repeat("a", 100<<10)}, 12),
	} {
		_, err := f.importImage("env", imageOf(t, env, layer))
		if err == nil {
			t.Errorf("%s: imported", what)
			continue
		}
		imageError(t, err, true, "environment")
	}
	if _, err := f.importImage("env", imageOf(t, []string{"X=1"}, layer)); err != nil {
		t.Fatal(err)
	}
	f.tmpEmpty()
	img := &Image{Config: Config{Env: []string{"X=a\x00b", "Y=1"}}}
	if got := img.Environ(); slices.ContainsFunc(got, func(kv string) bool { return strings.HasPrefix(kv, "X=") }) {
		t.Errorf("Environ kept an entry with a NUL byte: %q", got)
	}
}

// TestDeriveCancelledLeavesOthers: a build whose caller gives up fails
// for that caller only, whatever its error says (a tool killed with its
// context reports "signal: killed", no cancellation): a caller waiting on
// it builds in its turn.
func TestDeriveCancelledLeavesOthers(t *testing.T) {
	f := newFixture(t, Options{})
	if _, err := f.importImage("python", goodImage(t, "d")); err != nil {
		t.Fatal(err)
	}
	img, _ := f.acquire("python")
	ctx1, cancel1 := context.WithCancel(context.Background())
	defer cancel1()
	building := make(chan struct{})
	first := make(chan error, 1)
	go func() {
		_, err := f.s.Derive(ctx1, img, "disk", func(string) error {
			close(building)
			<-ctx1.Done()
			return errors.New("mkfs: signal: killed")
		})
		first <- err
	}()
	<-building
	second := make(chan error, 1)
	go func() {
		_, err := f.s.Derive(context.Background(), img, "disk", func(dir string) error {
			return os.WriteFile(filepath.Join(dir, "disk.img"), []byte("disk"), 0o644)
		})
		second <- err
	}()
	for f.s.waiting.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel1()
	if err := <-first; err == nil {
		t.Error("the abandoned build succeeded")
	}
	if err := <-second; err != nil {
		t.Fatalf("the waiting build failed with the abandoned one's error: %v", err)
	}
	if n := f.s.builds.Load(); n != 1 {
		t.Errorf("built %d times, want 1", n)
	}
	f.tmpEmpty()
}

// TestUnknownNameSaysWhatToDo: a name the store lacks says how to get it:
// a catalogue name is built with `airlock image build`, any other is
// named among the catalogue's and `airlock images`.
func TestUnknownNameSaysWhatToDo(t *testing.T) {
	f := newFixture(t, Options{})
	_, _, err := f.s.Acquire(context.Background(), "node")
	imageError(t, err, true, "image node: unknown image name: not built here (build it: airlock image build node)")
	_, _, err = f.s.Acquire(context.Background(), "pyhton")
	imageError(t, err, true, "unknown image name (airlock images lists the names; the catalogue builds minimal, node, python)")
}
