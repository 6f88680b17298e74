// Package testenv decides, in one place, what a test does when something
// it needs is missing from the machine: outside CI it skips, saying why;
// under CI (CI=true), where the project's set-up has installed everything
// the tests need, it fails instead, so that nothing is skipped unnoticed.
// AIRLOCK_ALLOW_SKIP=1 restores skipping under CI, for a CI that lacks a
// backend on purpose.
package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Strict reports whether a missing requirement fails tests (CI=true and
// AIRLOCK_ALLOW_SKIP unset).
func Strict() bool {
	return os.Getenv("CI") == "true" && os.Getenv("AIRLOCK_ALLOW_SKIP") == ""
}

// Skipf skips the test with the reason, or fails it with the reason when
// Strict.
func Skipf(t testing.TB, format string, args ...any) {
	t.Helper()
	why := fmt.Sprintf(format, args...)
	if Strict() {
		t.Fatalf("would skip, but under CI nothing may: %s", why)
	}
	t.Skip(why)
}

// ForeignDir returns a new directory, inside a test directory, that
// belongs to another user (nobody) and that the test process may use as
// root: a state directory someone else made before airlock did. It skips
// the test (fails under CI) without root.
func ForeignDir(t testing.TB) string {
	t.Helper()
	if os.Geteuid() != 0 {
		Skipf(t, "a directory of another user needs root to make")
	}
	dir := filepath.Join(t.TempDir(), "theirs")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	return dir
}
