//go:build unix

package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// SharedTmp returns a new directory laid out as the system's /tmp is:
// every user may reach it and make entries in it (mode 1777), and the
// directories above it are root's and closed to writes by others. It
// skips the test (fails under CI) without root.
func SharedTmp(t testing.TB) string {
	t.Helper()
	if os.Geteuid() != 0 {
		Skipf(t, "a directory another user writes in needs root to make")
	}
	base := t.TempDir()
	// t.TempDir's directories are 0700: open them for passing through.
	for d := base; d != filepath.Dir(d) && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if filepath.Dir(d) == os.TempDir() {
			break
		}
	}
	tmp := filepath.Join(base, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tmp, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	return tmp
}

// AsNobody runs script with sh as the unprivileged user nobody (uid and
// gid 65534, no supplementary groups), the arguments as $1, $2, ...: a
// local user who acts before airlock does. The test fails if it fails.
func AsNobody(t testing.TB, script string, args ...string) {
	t.Helper()
	cmd := exec.Command("/bin/sh", append([]string{"-ec", script, "sh"}, args...)...)
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("as nobody: %s: %v: %s", script, err, out)
	}
}
