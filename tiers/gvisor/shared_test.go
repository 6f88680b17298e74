package gvisor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
	"github.com/airlock-sandbox/airlock/internal/testing/tiertest"
)

// sharedTier builds a tier in dir, which other tiers of the test share,
// skipping (or, under CI, failing) when gVisor cannot run here. The tier
// is closed when the test ends; the test checks dir for leftovers itself,
// once every tier in it is closed.
func sharedTier(t *testing.T, dir string, cfg Config) *Tier {
	t.Helper()
	tier, err := New(cfg.WithDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	if err := tier.Available(); err != nil {
		tiertest.Unavailable(t, Name, err)
	}
	t.Cleanup(func() { tier.Close() })
	return tier
}

// rootState describes every entry under root: inode, mode, size,
// modification and change times, and a link's target. Rewriting,
// replacing or removing anything changes it.
func rootState(t *testing.T, root string) map[string]string {
	t.Helper()
	state := map[string]string{}
	err := filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		target, _ := os.Readlink(p)
		rel, _ := filepath.Rel(root, p)
		state[rel] = fmt.Sprintf("inode %d mode %o size %d mtime %d.%09d ctime %d.%09d link %q",
			st.Ino, st.Mode, st.Size, st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec, target)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return state
}

// mappedReader maps the file named by its first argument and hashes the
// mapping over and over for as many seconds as its second argument says.
// A mapped file truncated or rewritten on the host kills it with SIGBUS
// (exit 135) or changes the hash.
const mappedReader = `import hashlib, mmap, sys, time
with open(sys.argv[1], 'rb') as f:
    m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
want, n = hashlib.sha256(m).digest(), 0
end = time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    if hashlib.sha256(m).digest() != want:
        print('changed after', n, 'reads')
        sys.exit(1)
    n += 1
print('unchanged', n)
`

// TestSharedDirRoot attacks a directory shared by several tiers, as the
// default directory is shared by every airlock process on a machine: while
// a job of tier A keeps a file of its root mapped and reads it, and a
// session of A is open, other tiers are built in the same directory and
// closed, over and over. The job must finish normally, A's root must stay
// exactly as it was (nothing rewritten, replaced or removed), and A's
// session and later runs must work. When all tiers are closed, nothing is
// left.
func TestSharedDirRoot(t *testing.T) {
	if !exists("/usr/bin/python3") {
		testenv.Skipf(t, "no /usr/bin/python3 to map a file with (scripts/setup-python.sh installs it)")
	}
	dir := t.TempDir()
	var a *Tier
	t.Cleanup(func() { // registered first: runs after every tier's Close
		if a != nil {
			checkNoLeftovers(t, a)
		}
	})
	a = sharedTier(t, dir, NewConfig())
	ctx := context.Background()

	// The loader cache is what every dynamically linked program maps; the
	// root has it when the host's passes the tier's check.
	file := "/etc/ld.so.cache"
	if !exists(filepath.Join(a.rootfs, file)) {
		file = "/etc/passwd"
	}
	before := rootState(t, a.rootfs)

	s, err := a.OpenSession(ctx, airlock.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if res, err := s.Run(ctx, cmdJob("sh", "-c", "echo kept > kept.txt")); err != nil {
		t.Fatalf("session: %v (%+v)", err, res)
	}

	reader := cmdJob("python3", "-c", mappedReader, file, "3")
	reader.Limits.WallMS = 120_000
	type outcome struct {
		res airlock.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := a.Run(ctx, reader)
		done <- outcome{res, err}
	}()
	built := 0
	var got outcome
	for waiting := true; waiting; {
		select {
		case got = <-done:
			waiting = false
		default:
			b, err := New(NewConfig().WithDir(dir))
			if err != nil {
				t.Fatal(err)
			}
			if err := b.Available(); err != nil {
				t.Fatalf("second tier: %v", err)
			}
			b.Close()
			built++
			time.Sleep(20 * time.Millisecond)
		}
	}
	t.Logf("%d tiers built and closed in the directory while the job read %s", built, file)
	if got.err != nil || got.res.ExitCode != 0 || !strings.HasPrefix(got.res.Stdout, "unchanged") {
		t.Errorf("the job reading %s of its root failed while other tiers were built: %v (exit %d, stdout %q, stderr %q)",
			file, got.err, got.res.ExitCode, got.res.Stdout, got.res.Stderr)
	}
	after := rootState(t, a.rootfs)
	for p, was := range before {
		if now, ok := after[p]; !ok {
			t.Errorf("root of the live tier: %s removed", p)
		} else if now != was {
			t.Errorf("root of the live tier: %s changed: %s, was %s", p, now, was)
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			t.Errorf("root of the live tier: %s added", p)
		}
	}

	res, err := s.Run(ctx, cmdJob("sh", "-c", "cat kept.txt; grep -c nobody /etc/passwd"))
	if err != nil || res.Stdout != "kept\n1\n" {
		t.Errorf("session after the other tiers: %v (%+v)", err, res)
	}
	res, err = a.Run(ctx, cmdJob("python3", "-c", "print('later')"))
	if err != nil || res.Stdout != "later\n" {
		t.Errorf("a later run: %v (%+v)", err, res)
	}
}

// crash makes tier look like a tier whose process died without Close: its
// lock is released, as the kernel releases it when a process dies, and
// nothing else is cleaned up.
func crash(tier *Tier) {
	tier.lease.Release(false)
	tier.rootLock.Close()
}

// listed returns the ids runsc lists in tier's state directory.
func listed(t *testing.T, tier *Tier) []string {
	t.Helper()
	out, err := tier.runscOut(context.Background(), "list", "-quiet")
	if err != nil {
		t.Fatal(err)
	}
	ids := strings.Fields(string(out))
	sort.Strings(ids)
	return ids
}

// TestSharedDirSweep: two live tiers share a directory with a crashed one.
// Sweeps by either remove what the crashed tier left and nothing of the
// live ones: their pooled sandbox, sessions, roots and lock files survive,
// and both then run jobs at the same time, pooled, cold and in their
// sessions. Tier A is named after a PID that looks dead from here, as a
// tier in another PID namespace would be: a tier is alive while it holds
// its lock, whatever its PID says.
func TestSharedDirSweep(t *testing.T) {
	dir := t.TempDir()
	var a, b *Tier
	t.Cleanup(func() { // registered first: runs after every tier's Close
		if a != nil && b != nil {
			checkNoLeftovers(t, a, b)
		}
	})
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() { getpid = os.Getpid }()
		getpid = func() int { return dead.Process.Pid }
		a = sharedTier(t, dir, NewConfig().WithPool(1, 1))
	}()
	warm(t, a)
	b = sharedTier(t, dir, NewConfig()) // sweeps, with A's pooled sandbox running
	ctx := context.Background()

	open := func(tier *Tier, content string) airlock.Session {
		s, err := tier.OpenSession(ctx, airlock.SessionOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		if res, err := s.Run(ctx, cmdJob("sh", "-c", "echo "+content+" > mine.txt")); err != nil {
			t.Fatalf("session: %v (%+v)", err, res)
		}
		return s
	}
	sa, sb := open(a, "a"), open(b, "b")
	live := listed(t, a)
	if len(live) != 3 {
		t.Fatalf("want A's pooled sandbox and two sessions running, runsc lists %v", live)
	}

	c, err := New(NewConfig().WithDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	left, err := c.newAgentSandbox(modeOnce, airlock.FSGrant{}, nil, func() {})
	if err != nil {
		t.Fatal(err)
	}
	left.conn.Close()
	// What a tier keeps in its own directory (a dynamically linked
	// agent's libraries).
	if err := os.MkdirAll(c.agentLibHost(), 0o755); err != nil {
		t.Fatal(err)
	}
	crash(c)

	if n := b.Sweep(); n == 0 {
		t.Error("B's sweep removed nothing of the crashed tier")
	}
	if n := a.Sweep(); n != 0 {
		t.Errorf("A's sweep, after B's, removed %d items", n)
	}
	if got := listed(t, a); strings.Join(got, " ") != strings.Join(live, " ") {
		t.Errorf("after the sweeps runsc lists %v, want the live tiers' %v", got, live)
	}
	for _, p := range []string{left.dir, c.ownDir(), c.lease.Path(), filepath.Join(cgroupRoot, "memory", left.id)} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("the crashed tier's %s survived the sweeps", p)
		}
	}
	for _, tier := range []*Tier{a, b} {
		for _, p := range []string{tier.rootfs, tier.lease.Path()} {
			if !exists(p) {
				t.Errorf("a live tier's %s was swept", p)
			}
		}
	}

	hits := a.Stats().Hits
	var wg sync.WaitGroup
	check := func(name string, run func() (airlock.Result, error), want string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := run()
			if err != nil || res.Stdout != want {
				t.Errorf("%s: %v (%+v), want stdout %q", name, err, res, want)
			}
		}()
	}
	check("A pooled", func() (airlock.Result, error) { return a.Run(ctx, cmdJob("echo", "pooled")) }, "pooled\n")
	check("B cold", func() (airlock.Result, error) { return b.Run(ctx, cmdJob("echo", "cold")) }, "cold\n")
	check("A's session", func() (airlock.Result, error) { return sa.Run(ctx, cmdJob("cat", "mine.txt")) }, "a\n")
	check("B's session", func() (airlock.Result, error) { return sb.Run(ctx, cmdJob("cat", "mine.txt")) }, "b\n")
	wg.Wait()
	if got := a.Stats().Hits; got != hits+1 {
		t.Errorf("A's run did not claim its pooled sandbox (hits %d, was %d)", got, hits)
	}
}

// TestCloseWhileRunning: Close with a run in flight keeps the tier's hold
// on the root, and its lock, until the run is over (the run finishes
// normally), then gives both up; runs after Close are refused.
func TestCloseWhileRunning(t *testing.T) {
	tier := newTier(t, NewConfig())
	ctx := context.Background()
	type outcome struct {
		res airlock.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := tier.Run(ctx, cmdJob("sh", "-c", "sleep 2; grep -c nobody /etc/passwd"))
		done <- outcome{res, err}
	}()
	for deadline := time.Now().Add(time.Minute); len(listed(t, tier)) == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the run's sandbox never appeared")
		}
	}
	if err := tier.Close(); err != nil {
		t.Fatal(err)
	}
	if !exists(tier.rootfs) || !exists(tier.lease.Path()) {
		t.Error("Close removed the root or lock of a tier with a run in flight")
	}
	got := <-done
	if got.err != nil || got.res.Stdout != "1\n" {
		t.Errorf("the run in flight at Close: %v (%+v)", got.err, got.res)
	}
	if _, err := os.Lstat(tier.lease.Path()); !os.IsNotExist(err) {
		t.Errorf("%s left after the last run of a closed tier", tier.lease.Path())
	}
	if !unused(tier.rootfs) {
		t.Error("the closed tier still holds the shared root")
	}
	if _, err := tier.Run(ctx, cmdJob("true")); !errors.Is(err, errClosed) {
		t.Errorf("run after Close: want errClosed, got %v", err)
	}
	if _, err := tier.OpenSession(ctx, airlock.SessionOptions{}); !errors.Is(err, errClosed) {
		t.Errorf("session after Close: want errClosed, got %v", err)
	}
}

func TestParseID(t *testing.T) {
	for _, c := range []struct {
		id, owner string
		pid       int
	}{
		{"airlock-gv-42-0a1b2c3d-7.sb", "airlock-gv-42-0a1b2c3d", 0},
		{"airlock-gv-42-0a1b2c3d-7", "airlock-gv-42-0a1b2c3d", 0}, // the previous version's
		{"airlock-gv-42-0a1b2c3d-.sb", "", 0},
		{"airlock-gv-42-0a1b2c3d-7.sb.sb", "", 0},
		{"airlock-gv-42-0a1b2c3d-7.s", "", 0},
		{"airlock-gv-42-0123456789ab", "", 42}, // an earlier version's
		{"airlock-gv-42-0a1b2c3d", "", 0},      // an owner's name, not a sandbox's
		{"airlock-gv-42-0a1b2c3d-x", "", 0},
		{"airlock-gv-42-0A1B2C3D-1", "", 0},
		{"airlock-gv-0-0a1b2c3d-1", "", 0},
		{"airlock-gv-x-0a1b2c3d-1", "", 0},
		{"airlock-gv-42-", "", 0},
		{"airlock-process-42-0a1b2c3d-1", "", 0},
	} {
		if owner, pid := parseID(c.id); owner != c.owner || pid != c.pid {
			t.Errorf("parseID(%q) = %q, %d; want %q, %d", c.id, owner, pid, c.owner, c.pid)
		}
	}
}
