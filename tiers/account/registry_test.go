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
