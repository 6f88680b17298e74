package statedir

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
)

// A state directory someone else made, or one that others may write, or
// one below a directory others may change, is refused; one this user made
// below a sticky world-writable directory (the system's /tmp) is not.
func TestEnsure(t *testing.T) {
	base := t.TempDir()
	got, err := Ensure(filepath.Join(base, "a", "state"), 0o700)
	if err != nil {
		t.Fatalf("a new state directory: %v", err)
	}
	if st, err := os.Stat(got); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("made %s: %v %v", got, st.Mode(), err)
	}

	open := filepath.Join(base, "open")
	if err := os.Mkdir(open, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := Ensure(open, 0o700); !IsRefused(err) || !strings.Contains(err.Error(), "writable by others") {
		t.Errorf("a world-writable state directory: %v", err)
	}
	if _, err := Ensure(filepath.Join(open, "state"), 0o700); !IsRefused(err) {
		t.Errorf("below a world-writable directory without the sticky bit: %v", err)
	}
	if err := os.Chmod(open, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	if _, err := Ensure(filepath.Join(open, "state"), 0o700); err != nil {
		t.Errorf("below a sticky world-writable directory: %v", err)
	}
	if _, err := Ensure(base, 0o777); err == nil {
		t.Error("a mode that lets others write was accepted")
	}

	theirs := testenv.ForeignDir(t)
	if _, err := Ensure(theirs, 0o700); !IsRefused(err) || !strings.Contains(err.Error(), "belongs to uid 65534") {
		t.Errorf("a state directory another user made: %v", err)
	}
	if _, err := Ensure(filepath.Join(theirs, "below"), 0o700); !IsRefused(err) {
		t.Errorf("below a directory another user owns: %v", err)
	}
}

// A trusted file is checked like a state directory, through a link to
// where it really is.
func TestFile(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "record.json")
	if err := os.WriteFile(f, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := File(f); err != nil {
		t.Fatalf("this user's file: %v", err)
	}
	if err := File(dir); !IsRefused(err) {
		t.Errorf("a directory as a file: %v", err)
	}
	open := filepath.Join(dir, "open")
	if err := os.Mkdir(open, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	moved := filepath.Join(open, "record.json")
	if err := os.WriteFile(moved, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.json")
	if err := os.Symlink(moved, link); err != nil {
		t.Fatal(err)
	}
	if err := File(link); !IsRefused(err) || !strings.Contains(err.Error(), "writable by others") {
		t.Errorf("a link to a file in a directory others may write: %v", err)
	}
}

// The directories Ensure makes get its mode whatever the umask; one that
// exists keeps its own.
func TestEnsureModes(t *testing.T) {
	base := t.TempDir()
	if err := os.Chmod(base, 0o700); err != nil {
		t.Fatal(err)
	}
	old := syscall.Umask(0o077)
	_, err := Ensure(filepath.Join(base, "a", "b"), 0o755)
	syscall.Umask(old)
	if err != nil {
		t.Fatal(err)
	}
	mode := func(p string) os.FileMode {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return st.Mode().Perm()
	}
	for _, p := range []string{"a", "a/b"} {
		if m := mode(filepath.Join(base, p)); m != 0o755 {
			t.Errorf("%s: mode %v, want 0755", p, m)
		}
	}
	if m := mode(base); m != 0o700 {
		t.Errorf("the existing directory's mode changed to %v", m)
	}
}

// TestMakeable: a directory that exists, or whose nearest existing
// ancestor is a directory this process may write in, can be made; one
// below a file cannot; Makeable makes nothing.
func TestMakeable(t *testing.T) {
	base := t.TempDir()
	if !Makeable(base) || !Makeable(filepath.Join(base, "a", "b")) {
		t.Error("a directory below a writable one is not makeable")
	}
	if _, err := os.Stat(filepath.Join(base, "a")); err == nil {
		t.Error("Makeable made a directory")
	}
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if Makeable(filepath.Join(file, "home", ".cache")) {
		t.Error("a directory below a file is makeable")
	}
}
