package microvm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDefaultCacheDirWithoutHome: without a user's cache directory that
// can be made (a home that does not exist, as nobody's), the tier's cache
// is in the temporary directory, beside its state, instead of a directory
// the tier then fails to make.
func TestDefaultCacheDirWithoutHome(t *testing.T) {
	blocker := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("HOME", filepath.Join(blocker, "home"))
	cfg := DefaultConfig()
	if want := defaultStateDir(os.TempDir(), os.Geteuid()) + "-cache"; cfg.cacheDir != want {
		t.Errorf("without a home: cache %s, want %s", cfg.cacheDir, want)
	}
	home := t.TempDir()
	t.Setenv("HOME", home)
	if cfg := DefaultConfig(); !strings.HasPrefix(cfg.cacheDir, home) {
		t.Errorf("with a home: cache %s, want it under %s", cfg.cacheDir, home)
	}
}
