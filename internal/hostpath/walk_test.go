package hostpath

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWalkMatchesOpenat2 holds the component-at-a-time opening that
// builds without openat2 use to what the Linux build does: the same
// identities, the same refusals of links anywhere on the path.
func TestWalkMatchesOpenat2(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "d", "f"), "x")
	write(t, filepath.Join(dir, "d", "big"), strings.Repeat("b", MaxContentDigest+1))
	if err := os.Symlink("d", filepath.Join(dir, "l")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("f", filepath.Join(dir, "d", "lf")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/", dir, filepath.Join(dir, "d"), filepath.Join(dir, "d", "f"), filepath.Join(dir, "d", "big")} {
		want, err := Identity(p)
		if err != nil {
			t.Fatalf("Identity(%s): %v", p, err)
		}
		if got, err := identityWalk(p); err != nil || got != want {
			t.Errorf("identityWalk(%s) = %q, %v; want %q", p, got, err, want)
		}
		if err := checkWalk(p); err != nil {
			t.Errorf("checkWalk(%s): %v", p, err)
		}
	}
	for _, p := range []string{filepath.Join(dir, "l"), filepath.Join(dir, "l", "f"), filepath.Join(dir, "d", "lf")} {
		if _, err := identityWalk(p); err == nil || !strings.Contains(err.Error(), "symbolic link") {
			t.Errorf("identityWalk(%s) of a link: %v", p, err)
		}
		if err := checkWalk(p); err == nil || !strings.Contains(err.Error(), "symbolic link") {
			t.Errorf("checkWalk(%s) of a link: %v", p, err)
		}
		if r, err := openRootWalk(p); err == nil {
			r.Close()
			t.Errorf("openRootWalk(%s) opened through a link", p)
		}
	}
	r, err := openRootWalk(filepath.Join(dir, "d"))
	if err != nil {
		t.Fatal(err)
	}
	if data, err := r.ReadFile("f"); err != nil || string(data) != "x" {
		t.Errorf("reading through the root: %q, %v", data, err)
	}
	r.Close()
	if _, err := openRootWalk(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing directory: %v; want not-exist", err)
	}
	if _, err := openRootWalk(filepath.Join(dir, "d", "f")); err == nil {
		t.Error("a file opened as a root")
	}
	if err := checkWalk("relative/path"); err == nil {
		t.Error("a relative path was checked")
	}
}
