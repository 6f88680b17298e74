package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
	"github.com/airlock-sandbox/airlock/internal/tools"
)

// updateExamples rewrites the generated files of examples/ instead of
// comparing them: go test ./cmd/airlock -run TestExamplesInSync -update-examples
var updateExamples = flag.Bool("update-examples", false, "rewrite examples/*.wasm and examples/tools-oci")

// TestExamplesInSync checks that the README's generated example files are
// what their sources make: each examples/NAME.wasm is wat2wasm of
// NAME.wat, and examples/tools-oci is the layout writeToolsOCI writes.
func TestExamplesInSync(t *testing.T) {
	t.Run("oci", func(t *testing.T) {
		got := filepath.Join(t.TempDir(), "tools-oci")
		if err := writeToolsOCI(got); err != nil {
			t.Fatal(err)
		}
		want := filepath.Join("..", "..", "examples", "tools-oci")
		if *updateExamples {
			if err := os.RemoveAll(want); err != nil {
				t.Fatal(err)
			}
			if err := os.CopyFS(want, os.DirFS(got)); err != nil {
				t.Fatal(err)
			}
		}
		gotFiles, wantFiles := readTree(t, got), readTree(t, want)
		for name, data := range gotFiles {
			if w, ok := wantFiles[name]; !ok || !bytes.Equal(w, data) {
				t.Errorf("examples/tools-oci/%s is out of date (run with -update-examples)", name)
			}
		}
		for name := range wantFiles {
			if _, ok := gotFiles[name]; !ok {
				t.Errorf("examples/tools-oci/%s is not what writeToolsOCI writes (run with -update-examples)", name)
			}
		}
	})
	t.Run("wasm", func(t *testing.T) {
		w2w, err := tools.Find("wat2wasm")
		if err != nil {
			testenv.Skipf(t, "wat2wasm (scripts/setup-wabt.sh installs it): %v", err)
		}
		for _, name := range []string{"echo", "greet"} {
			src := filepath.Join("..", "..", "examples", name+".wat")
			out := filepath.Join(t.TempDir(), name+".wasm")
			if msg, err := exec.Command(w2w, src, "-o", out).CombinedOutput(); err != nil {
				t.Fatalf("wat2wasm %s: %v\n%s", src, err, msg)
			}
			got, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			dst := filepath.Join("..", "..", "examples", name+".wasm")
			if *updateExamples {
				if err := os.WriteFile(dst, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if want, err := os.ReadFile(dst); err != nil || !bytes.Equal(got, want) {
				t.Errorf("examples/%s.wasm is not wat2wasm of %s.wat (run with -update-examples): %v", name, name, err)
			}
		}
	})
}

// readTree maps each regular file under dir to its content.
func readTree(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		files[filepath.ToSlash(rel)] = data
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// writeToolsOCI writes examples/tools-oci: an OCI image layout of one
// linux/amd64 image whose single layer holds a text file, small enough to
// keep in the repository and reproducible byte for byte.
func writeToolsOCI(dir string) error {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0).UTC()
	text := []byte("An image imported from an OCI layout: airlock image import tools examples/tools-oci\n")
	for _, h := range []*tar.Header{
		{Typeflag: tar.TypeDir, Name: "usr/", Mode: 0o755, ModTime: epoch},
		{Typeflag: tar.TypeDir, Name: "usr/share/", Mode: 0o755, ModTime: epoch},
		{Typeflag: tar.TypeDir, Name: "usr/share/tools/", Mode: 0o755, ModTime: epoch},
		{Typeflag: tar.TypeReg, Name: "usr/share/tools/README", Mode: 0o644, ModTime: epoch, Size: int64(len(text))},
	} {
		h.Format = tar.FormatPAX
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(text); err != nil {
				return err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	data := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Created = v1.Time{Time: epoch}
	cf.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	return p.AppendImage(img, layout.WithPlatform(v1.Platform{OS: "linux", Architecture: "amd64"}))
}
