// Package imagetest gives the tiers' tests images without a store: roots
// the test builds in a directory, behind an image.Resolver that counts what
// is held, so a test can check that every sandbox released its image; and,
// for a test of a real store, those roots as OCI image layouts.
package imagetest

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
)

// Resolver serves images from directories. The zero value serves nothing;
// Add registers images.
type Resolver struct {
	mu      sync.Mutex
	images  map[string]*image.Image
	def     string
	host    bool
	held    int
	derived string
	builds  map[string]int
	adds    map[string]int
}

// New returns an empty resolver whose derived artefacts live in a
// directory of the test's.
func New(t testing.TB) *Resolver {
	return &Resolver{images: map[string]*image.Image{}, derived: t.TempDir(), builds: map[string]int{}, adds: map[string]int{}}
}

// Add registers root as image name, with a digest made from the name, and
// makes it the default when it is the first. Adding a name again moves it
// to the new image, under a digest of its own, as a catalogue name moves
// when its image is rebuilt.
func (r *Resolver) Add(name, root string, cfg image.Config) *image.Image {
	r.mu.Lock()
	defer r.mu.Unlock()
	seed := name
	if n := r.adds[name]; n > 0 {
		seed = fmt.Sprintf("%s\x00%d", name, n)
	}
	r.adds[name]++
	sum := sha256.Sum256([]byte(seed))
	img := &image.Image{Ref: name, Digest: "sha256:" + hex.EncodeToString(sum[:]), Root: root, Config: cfg}
	r.images[name] = img
	if r.def == "" {
		r.def = name
	}
	return img
}

// AllowHost lets jobs name image.Host.
func (r *Resolver) AllowHost() { r.mu.Lock(); r.host = true; r.mu.Unlock() }

// Held is how many acquired images are not yet released.
func (r *Resolver) Held() int { r.mu.Lock(); defer r.mu.Unlock(); return r.held }

// Builds is how many times Derive built kind for the image named name.
func (r *Resolver) Builds(name, kind string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.builds[name+"/"+kind]
}

// Acquire implements image.Resolver.
func (r *Resolver) Acquire(ctx context.Context, ref string) (*image.Image, func(), error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ref == "" {
		ref = r.def
	}
	if ref == image.Host {
		if !r.host {
			return nil, nil, &image.Error{Ref: ref, Invalid: true, Err: fmt.Errorf("the host view is not enabled")}
		}
		return &image.Image{Ref: image.Host, Digest: image.Host}, func() {}, nil
	}
	img, ok := r.images[ref]
	if !ok {
		return nil, nil, &image.Error{Ref: ref, Invalid: true, Err: fmt.Errorf("not in the catalogue")}
	}
	r.held++
	var once sync.Once
	return img, func() {
		once.Do(func() { r.mu.Lock(); r.held--; r.mu.Unlock() })
	}, nil
}

// Derive implements image.Resolver (builds are serialised; enough for
// tests).
func (r *Resolver) Derive(ctx context.Context, img *image.Image, kind string, build func(dir string) error) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	dir := filepath.Join(r.derived, strings.TrimPrefix(img.Digest, "sha256:"), kind)
	if _, err := os.Stat(dir); err == nil {
		return dir, nil
	}
	tmp := dir + ".tmp"
	os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return "", err
	}
	if err := build(tmp); err != nil {
		os.RemoveAll(tmp)
		return "", err
	}
	r.builds[img.Ref+"/"+kind]++
	return dir, os.Rename(tmp, dir)
}

// Busybox builds a root in a directory of the test's from the host's static
// busybox: /bin/busybox with a link per applet, /usr/bin linked to /bin, and
// an /etc/os-release naming it, so a test can tell it from the host. It
// fails the test under CI (skips elsewhere) when no static busybox is
// installed.
func Busybox(t testing.TB, marker string) string {
	t.Helper()
	bb, err := exec.LookPath("busybox")
	if err != nil {
		testenv.Skipf(t, "no busybox on this machine (make setup installs it): %v", err)
	}
	out, err := exec.Command("file", "-L", bb).Output()
	if err == nil && !strings.Contains(string(out), "statically linked") {
		testenv.Skipf(t, "%s is not statically linked", bb)
	}
	root := t.TempDir()
	for _, d := range []string{"bin", "usr", "etc", "tmp"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "bin", "busybox"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	list, err := exec.Command(bb, "--list").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, applet := range strings.Fields(string(list)) {
		if applet == "busybox" {
			continue
		}
		if err := os.Symlink("busybox", filepath.Join(root, "bin", applet)); err != nil && !os.IsExist(err) {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("../bin", filepath.Join(root, "usr", "bin")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc", "os-release"), []byte("ID="+marker+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

// Layout writes root as a one-layer linux/amd64 image in an OCI image
// layout directory of the test's, with env as its environment, for a test
// that imports it into a real store.
func Layout(t testing.TB, root string, env []string) string {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		var link string
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		hdr.Name = filepath.ToSlash(rel)
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			_, err = tw.Write(data)
			return err
		}
		return nil
	})
	if err == nil {
		err = tw.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
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
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "layout")
	p, err := layout.Write(dir, empty.Index)
	if err == nil {
		err = p.AppendImage(img)
	}
	if err != nil {
		t.Fatal(err)
	}
	return dir
}
