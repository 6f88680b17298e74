package gvisor

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/statedir"
	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
)

// TestSharedRoot: tiers of one directory share one root, built once: a
// second tier, and a tier after every earlier one closed, use the same
// directory (the same inode), so none pays for building it again. A
// sweep removes a shared root no live tier holds (a stale one, of other
// content) and never one a tier holds.
func TestSharedRoot(t *testing.T) {
	dir := t.TempDir()
	a := sharedTier(t, dir, NewConfig())
	b := sharedTier(t, dir, NewConfig())
	ino := func(p string) uint64 {
		t.Helper()
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return st.Sys().(*syscall.Stat_t).Ino
	}
	if a.rootfs != b.rootfs || ino(a.rootfs) != ino(b.rootfs) {
		t.Fatalf("two tiers of one directory built two roots: %s and %s", a.rootfs, b.rootfs)
	}
	if !strings.HasPrefix(filepath.Base(a.rootfs), sharedRootPrefix) {
		t.Errorf("root %s is not named as a shared one", a.rootfs)
	}
	for _, p := range []string{"etc/passwd", "usr", strings.TrimPrefix(agentBin, "/"), "scratch", ".airlock/sock"} {
		if _, err := os.Lstat(filepath.Join(a.rootfs, p)); err != nil {
			t.Errorf("root lacks %s: %v", p, err)
		}
	}
	first := ino(a.rootfs)
	a.Close()
	b.Close()
	if unused(a.rootfs) != true {
		t.Error("closed tiers still hold the root")
	}

	roots := filepath.Join(a.base, "roots")
	stale := func(name string) string {
		p := filepath.Join(roots, sharedRootPrefix+name)
		if err := os.MkdirAll(filepath.Join(p, "etc"), 0o711); err != nil {
			t.Fatal(err)
		}
		return p
	}
	free, held := stale("000000000000000000000000"), stale("111111111111111111111111")
	hold, err := os.Open(held)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close()
	if err := syscall.Flock(int(hold.Fd()), syscall.LOCK_SH); err != nil {
		t.Fatal(err)
	}

	c := sharedTier(t, dir, NewConfig()) // sweeps
	if ino(c.rootfs) != first {
		t.Errorf("a later tier rebuilt the root (%s)", c.rootfs)
	}
	if _, err := os.Lstat(free); !os.IsNotExist(err) {
		t.Errorf("the sweep left a shared root no tier holds: %v", err)
	}
	if _, err := os.Lstat(held); err != nil {
		t.Errorf("the sweep removed a shared root a tier holds: %v", err)
	}
	hold.Close()
	if n := c.Sweep(); n != 1 {
		t.Errorf("sweep after the hold ended removed %d items, want 1", n)
	}
	if _, err := os.Lstat(held); !os.IsNotExist(err) {
		t.Errorf("the released root survived the sweep: %v", err)
	}
	if _, err := os.Lstat(c.rootfs); err != nil {
		t.Errorf("the sweep removed the root of the tier sweeping: %v", err)
	}
	c.Close()
	checkNoLeftovers(t, c)
}

// A directory another user made (before airlock did, in the shared
// temporary directory, say) is refused: its owner could replace what the
// tier makes there with links, and the tier, as root, would write a job's
// files wherever they lead.
func TestForeignDirRefused(t *testing.T) {
	newTier(t, NewConfig()) // skips where the tier cannot run at all
	tier, err := New(NewConfig().WithDir(testenv.ForeignDir(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer tier.Close()
	if err := tier.Available(); !statedir.IsRefused(err) {
		t.Errorf("a tier in another user's directory: available is %v", err)
	}
}

// A local user (nobody) who leaves a link under the default directory's
// name ($TMPDIR/airlock-gvisor) before root's airlock first runs, leading
// to a directory of root's, is refused: the tier would have made its
// sandboxes where that user chose.
func TestLinkedDirRefused(t *testing.T) {
	newTier(t, NewConfig()) // skips where the tier cannot run at all
	tmp := testenv.SharedTmp(t)
	roots := filepath.Join(filepath.Dir(tmp), "roots")
	if err := os.Mkdir(roots, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", tmp)
	testenv.AsNobody(t, `ln -s "$2" "$1/airlock-gvisor"`, tmp, roots)
	tier, err := New(NewConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer tier.Close()
	if err := tier.Available(); !statedir.IsRefused(err) || !strings.Contains(err.Error(), "airlock-gvisor is a symbolic link") {
		t.Errorf("a directory another user linked: available is %v", err)
	}
	if ents, _ := os.ReadDir(roots); len(ents) > 0 {
		t.Errorf("the tier made %s where the link led", ents[0].Name())
	}
}

// A root built under a strict umask still lets the sandbox's user read it.
func TestRootModesIgnoreUmask(t *testing.T) {
	entries, _, err := rootPlan(NewConfig().hostDirs)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "root")
	old := syscall.Umask(0o077)
	err = os.Mkdir(dir, 0o711)
	if err == nil {
		err = buildRoot(dir, entries)
	}
	syscall.Umask(old)
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]os.FileMode{".": 0o755, "etc": 0o755, "etc/passwd": 0o644, strings.TrimPrefix(agentBin, "/"): 0o755} {
		st, err := os.Stat(filepath.Join(dir, path))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", path, st.Mode().Perm(), want)
		}
	}
}
