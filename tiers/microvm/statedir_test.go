package microvm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/statedir"
	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
)

// A state directory another user made is refused: its owner could replace
// the VM directories the tier makes there with links.
func TestForeignStateDirRefused(t *testing.T) {
	tier, err := New(testConfig().WithStateDir(filepath.Join(testenv.ForeignDir(t), "state")))
	if err == nil {
		tier.Close()
	}
	if !statedir.IsRefused(err) {
		t.Errorf("a tier in another user's directory: %v", err)
	}
}

// A cache directory another user made is refused too: a cached initramfs
// there is what every guest would boot.
func TestForeignCacheDirRefused(t *testing.T) {
	shared.get(t, WarmCold) // skips where the tier cannot run at all
	tier, err := New(testConfig().WithCacheDir(filepath.Join(testenv.ForeignDir(t), "cache")).WithStateDir(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	defer tier.Close()
	if err := tier.Available(); !statedir.IsRefused(err) {
		t.Errorf("a tier with another user's cache directory: available is %v", err)
	}
}

// A local user (nobody) who leaves a link under the default state
// directory's name in a shared temporary directory, leading to a
// directory of root's, is refused: the tier kept using the name, which
// that user can point at their own directory once it was checked.
func TestLinkedStateDirRefused(t *testing.T) {
	tmp := testenv.SharedTmp(t)
	roots := filepath.Join(filepath.Dir(tmp), "roots")
	if err := os.Mkdir(roots, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", tmp)
	dir := DefaultConfig().stateDir
	testenv.AsNobody(t, `ln -s "$2" "$1"`, dir, roots)
	tier, err := New(testConfig().WithStateDir(dir))
	if err == nil {
		tier.Close()
	}
	if !statedir.IsRefused(err) || !strings.Contains(err.Error(), "is a symbolic link") {
		t.Errorf("a state directory another user linked: %v", err)
	}
}
