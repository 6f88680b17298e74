package process

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
)

// A read grant is bound through a descriptor opened refusing links: a
// link put where the checked path was (or on its way) is not followed,
// where open_tree by name would follow it.
func TestCloneGrantRefusesLinks(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skipf(t, "open_tree with OPEN_TREE_CLONE needs root")
	}
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"link": "real", "up": "."} {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	f, err := cloneGrant(real)
	if err != nil {
		t.Fatalf("a real directory: %v", err)
	}
	f.Close()
	for _, p := range []string{filepath.Join(dir, "link"), filepath.Join(dir, "up", "real")} {
		if f, err := cloneGrant(p); err == nil || !strings.Contains(err.Error(), "symbolic link") {
			if f != nil {
				f.Close()
			}
			t.Errorf("%s: %v; want a refusal naming the symbolic link", p, err)
		}
		if f, err := cloneTree(p, 0); err == nil { // what a bind by name would do
			f.Close()
		} else {
			t.Errorf("open_tree by name of %s: %v", p, err)
		}
	}
}
