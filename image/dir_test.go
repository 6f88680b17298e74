package image

import (
	"os"
	"path/filepath"
	"testing"
)

// TestDefaultDirWithoutHome: a user whose cache directory cannot be made
// (a home that does not exist, as nobody's) keeps the store in the
// temporary directory under a name of its own, as a user without a cache
// directory does; with a usable home it is there.
func TestDefaultDirWithoutHome(t *testing.T) {
	blocker := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(DirEnv, "")
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("HOME", filepath.Join(blocker, "home"))
	if got, want := defaultDir(65534), filepath.Join(os.TempDir(), "airlock-images-65534"); got != want {
		t.Errorf("without a home: %s, want %s", got, want)
	}
	home := t.TempDir()
	t.Setenv("HOME", home)
	if got, want := defaultDir(65534), filepath.Join(home, ".cache", "airlock", "images"); got != want {
		t.Errorf("with a home: %s, want %s", got, want)
	}
	if got := defaultDir(0); got != "/var/lib/airlock/images" {
		t.Errorf("root's: %s", got)
	}
}
