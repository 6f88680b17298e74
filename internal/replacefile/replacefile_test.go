package replacefile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestWriteReplacesALinkNotItsTarget(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	name := filepath.Join(dir, "name")
	if err := os.Symlink(target, name); err != nil {
		t.Fatal(err)
	}
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	if err := Write(name, 0o644, []byte("new")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(target); string(b) != "keep" {
		t.Fatalf("written through the link: target holds %q", b)
	}
	st, err := os.Lstat(name)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Mode().IsRegular() || st.Mode().Perm() != 0o644 {
		t.Fatalf("name is %v, want a regular file of mode 0644 whatever the umask", st.Mode())
	}
	if b, _ := os.ReadFile(name); string(b) != "new" {
		t.Fatalf("name holds %q, want %q", b, "new")
	}
}

func TestFillFailureKeepsTheOldFile(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "name")
	if err := os.WriteFile(name, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := Fill(name, 0o644, func(w io.Writer) error {
		_, _ = w.Write([]byte("half"))
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Fill = %v, want the fill's error", err)
	}
	if b, _ := os.ReadFile(name); string(b) != "old" {
		t.Fatalf("name holds %q after a failed fill, want the old content", b)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("the directory holds %d entries after a failed fill, want only the file (no temporary left)", len(ents))
	}
}
