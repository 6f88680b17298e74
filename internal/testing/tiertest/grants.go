package tiertest

import (
	"os"
	"path/filepath"
	"testing"
)

// GrantTree makes a host directory for read-grant tests, mode 0755:
// a file x and sub/data.txt (both "granted\n"), a file private only its
// owner may read ("PRIVATE\n"), and links pointing out of it at the file
// secret beside it ("SECRET\n"): out by its absolute path, rel by a
// relative one, and up at the parent directory.
func GrantTree(t testing.TB) (dir, secret string) {
	t.Helper()
	base := t.TempDir()
	dir = filepath.Join(base, "grant")
	secret = filepath.Join(base, "secret")
	for _, err := range []error{
		os.MkdirAll(filepath.Join(dir, "sub"), 0o755),
		os.Chmod(dir, 0o755),
		os.WriteFile(filepath.Join(dir, "x"), []byte("granted\n"), 0o644),
		os.WriteFile(filepath.Join(dir, "sub", "data.txt"), []byte("granted\n"), 0o644),
		os.WriteFile(filepath.Join(dir, "private"), []byte("PRIVATE\n"), 0o600),
		os.WriteFile(secret, []byte("SECRET\n"), 0o644),
		os.Symlink(secret, filepath.Join(dir, "out")),
		os.Symlink("../secret", filepath.Join(dir, "rel")),
		os.Symlink("..", filepath.Join(dir, "up")),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	return dir, secret
}
