package account

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
)

// An account's record names the uid whose executor gets the account's
// jobs: one that someone else could have written or replaced is refused.
func TestLoadRefusesUntrustedRecord(t *testing.T) {
	r := Record{Name: "ci", User: "nobody", UID: 65534, GID: 65534}
	dir := t.TempDir()
	if err := r.Save(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir, "ci"); err != nil {
		t.Fatalf("a record of this user's: %v", err)
	}
	if err := os.Chmod(filepath.Join(dir, "ci.json"), 0o666); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir, "ci"); err == nil || !strings.Contains(err.Error(), "writable by others") {
		t.Errorf("a record others may write: %v", err)
	}
	theirs := testenv.ForeignDir(t)
	if err := r.Save(theirs); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(theirs, "ci"); err == nil || !strings.Contains(err.Error(), "belongs to uid 65534") {
		t.Errorf("a record in another user's directory: %v", err)
	}
	if _, err := List(theirs); err == nil {
		t.Error("List read a record in another user's directory")
	}
}

// TestSaveWritesThroughNoLink: saving a record writes a fresh file renamed
// over the name; a link planted where a fixed temporary name would be, or
// at the record's own name, is replaced, never written through.
func TestSaveWritesThroughNoLink(t *testing.T) {
	dir := t.TempDir()
	outside := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(outside, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{".ci.json.tmp", "ci.json"} {
		if err := os.Symlink(outside, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	r := Record{Name: "ci", User: "nobody", UID: 65534, GID: 65534}
	if err := r.Save(dir); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(outside); string(b) != "keep" {
		t.Fatalf("Save wrote through a link: the file it led to holds %q", b)
	}
	if st, err := os.Lstat(filepath.Join(dir, "ci.json")); err != nil || !st.Mode().IsRegular() {
		t.Fatalf("ci.json after Save: %v %v, want a regular file", st, err)
	}
}
