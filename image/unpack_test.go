//go:build linux

package image

import (
	"archive/tar"
	"bytes"
	"io"
	"log"
	"os"
	"path/filepath"
	"testing"
)

func nilLogger() *log.Logger { return log.New(io.Discard, "", 0) }

// FuzzUnpack applies arbitrary bytes as a layer: whatever it does, nothing
// appears outside the root and the root stays removable.
func FuzzUnpack(f *testing.F) {
	seeds := [][]ent{
		{file("a/b", "x"), symlink("l", "/"), file("l/etc/x", "y")},
		{file("../x", "x")},
		{symlink("up", ".."), dir("up/d")},
		{file("f", "1"), hardlink("h", "f"), hardlink("g", "/etc/passwd")},
		{dir("d"), file("d/x", "x"), whiteout("d/.wh..wh..opq"), whiteout(".wh.d")},
		{{name: "dev/null", typ: tar.TypeChar, mode: 0o666}, {name: "s", typ: tar.TypeReg, mode: 0o7777, body: "s"}},
		{bigFile("big", 1<<40)},
	}
	for _, s := range seeds {
		f.Add(tarBytes(f, s...))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		base := t.TempDir()
		root := filepath.Join(base, "root")
		if err := os.Mkdir(root, 0o755); err != nil {
			t.Fatal(err)
		}
		u, err := newUnpacker(root, 1<<20, nil)
		if err != nil {
			t.Fatal(err)
		}
		u.apply(bytes.NewReader(data))
		u.close()
		ents, _ := os.ReadDir(base)
		if len(ents) != 1 {
			t.Fatalf("written beside the root: %v", ents)
		}
		if err := os.RemoveAll(root); err != nil {
			t.Fatalf("root not removable: %v", err)
		}
	})
}
