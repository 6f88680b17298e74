package stage

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
)

// TestEtcShowsWhatOthersMayRead: the /etc template copies a host file
// only if others may read it, and with the host's mode, though its
// builder is root. Host files are replaced in a mount namespace of the
// test's own, on a thread that dies with it.
func TestEtcShowsWhatOthersMayRead(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skipf(t, "needs root: it mounts over host files in a private mount namespace")
	}
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("ROOT-ONLY\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	public := filepath.Join(dir, "public")
	if err := os.WriteFile(public, []byte("# services\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(public, 0o444); err != nil {
		t.Fatal(err)
	}
	etc := filepath.Join(dir, "etc")
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread and its namespace end with the goroutine
		errc <- func() error {
			if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
				return err
			}
			if err := unix.Mount("", "/", "", unix.MS_PRIVATE|unix.MS_REC, ""); err != nil {
				return err
			}
			for src, dst := range map[string]string{secret: "/etc/magic", public: "/etc/services"} {
				if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
					return err
				}
			}
			return buildEtc(etc)
		}()
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(etc, "magic")); !os.IsNotExist(err) {
		t.Errorf("a root-only host file is in the template: %v", err)
	}
	st, err := os.Stat(filepath.Join(etc, "services"))
	if err != nil || st.Mode().Perm() != 0o444 {
		t.Errorf("a readable host file: %v, mode %v, want 0444", err, st)
	}
}
