package gvisor

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/testing/tiertest"
	"github.com/airlock-sandbox/airlock/role"
)

// TestPoolBindsPolicyAtClaim proves that a pooled sandbox, created under the
// policy's defaults before any job existed, enforces the limits and carries
// the secrets of the job that claims it.
func TestPoolBindsPolicyAtClaim(t *testing.T) {
	policy := airlock.DefaultLimitPolicy()
	policy.Default.MemoryMB = 160
	tier := newTier(t, NewConfig().WithLimits(policy).WithPool(1, 1))
	run := func(job airlock.Job) (airlock.Result, error) {
		t.Helper()
		warm(t, tier)
		hits := tier.Stats().Hits
		res, err := tier.Run(context.Background(), job)
		if tier.Stats().Hits != hits+1 {
			t.Fatalf("job did not claim a pooled sandbox: %+v", tier.Stats())
		}
		return res, err
	}
	hog := func(mb, limit int64) airlock.Job {
		j := cmdJob("perl", "-e", "my $x = 'a' x ("+itoa(int(mb))+" << 20); print qq(survived\n)")
		j.Limits = airlock.Limits{MemoryMB: limit, WallMS: 60_000}
		return j
	}

	t.Run("LowerMemory", func(t *testing.T) {
		// A 60 MB string (perl holds about twice that while building it)
		// fits the 160 MB the sandbox was created with, but not the 48 MB
		// the claiming job allows.
		res, err := run(hog(60, 48))
		var st *airlock.Stop
		if !errors.As(err, &st) || st.Reason != airlock.StopMemory {
			t.Fatalf("want a memory stop under the claim's 48 MB, got %v (%+v)", err, res)
		}
	})
	t.Run("HigherMemory", func(t *testing.T) {
		// 120 MB (about 240 MB while built) exceeds the creation-time 160 MB
		// but fits the claim's 480 MB.
		res, err := run(hog(120, 480))
		if err != nil || !strings.Contains(res.Stdout, "survived") {
			t.Fatalf("want the job to fit the claim's 480 MB, got %v (%+v)", err, res)
		}
	})
	t.Run("Secrets", func(t *testing.T) {
		j := cmdJob("sh", "-c", "echo \"token=$TOKEN\"; env")
		j.Grants.Secrets = map[string]string{"TOKEN": "claim-time-secret"}
		res, err := run(j)
		if err != nil || !strings.Contains(res.Stdout, "token=claim-time-secret") {
			t.Fatalf("claim's secret missing: %v (%+v)", err, res)
		}
		if strings.Contains(res.Stdout, role.Env) {
			t.Fatalf("the agent's environment leaked into the job: %q", res.Stdout)
		}
		// The next claim gets a fresh sandbox: the secret is gone.
		res, err = run(cmdJob("sh", "-c", "echo \"token=$TOKEN\"; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'"))
		if err != nil || strings.Contains(res.Stdout, "claim-time-secret") {
			t.Fatalf("a later claim saw the earlier job's secret: %v (%+v)", err, res)
		}
	})
	t.Run("WallClock", func(t *testing.T) {
		j := cmdJob("sleep", "30")
		j.Limits.WallMS = 500
		res, err := run(j)
		var st *airlock.Stop
		if !errors.As(err, &st) || st.Reason != airlock.StopTimeout {
			t.Fatalf("want a timeout at the claim's 500 ms, got %v (%+v)", err, res)
		}
	})
}

// TestPoolNeverReuses checks that every claim gets a sandbox of its own:
// a file left by one job is not seen by the next, and the pool refills.
func TestPoolNeverReuses(t *testing.T) {
	tier := newTier(t, NewConfig().WithPool(1, 1))
	for i := range 3 {
		warm(t, tier)
		res, err := tier.Run(context.Background(), cmdJob("sh", "-c", "ls; echo x > left-behind"))
		if err != nil || strings.Contains(res.Stdout, "left-behind") {
			t.Fatalf("run %d: %v, stdout %q", i, err, res.Stdout)
		}
	}
	st := tier.Stats()
	if st.Hits != 3 || st.Created < 3 || st.MeanFill <= 0 {
		t.Fatalf("stats %+v, want 3 hits from 3 fresh sandboxes", st)
	}
}

// TestPoolEmptyFallsBackCold checks that a job finding the pool empty runs
// cold rather than failing or waiting.
func TestPoolEmptyFallsBackCold(t *testing.T) {
	tier := newTier(t, NewConfig().WithPool(1, 1))
	// Claim the only sandbox (or find none yet): either way the next job
	// meets an empty pool while the filler works.
	tier.pool.Claim(poolKey{}, nil)
	var sb *sandbox
	for ok := false; !ok; {
		sb, ok = tier.pool.Claim(poolKey{}, nil)
		time.Sleep(10 * time.Millisecond)
	}
	tier.destroyLater(sb)
	misses := tier.Stats().Misses
	res, err := tier.Run(context.Background(), cmdJob("echo", "cold"))
	if err != nil || res.Stdout != "cold\n" {
		t.Fatalf("cold fallback: %v (%+v)", err, res)
	}
	if st := tier.Stats(); st.Misses <= misses {
		t.Fatalf("miss not counted: %+v", st)
	}
}

// openSession opens a session on a fresh tier; it is closed when the test
// ends (before the tier's leftover check).
func openSession(t *testing.T, opts airlock.SessionOptions) airlock.Session {
	t.Helper()
	tier := newTier(t, NewConfig())
	s, err := tier.OpenSession(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestSession(t *testing.T) {
	s := openSession(t, airlock.SessionOptions{})
	j := cmdJob("sh", "-c", "echo kept > state.txt; sleep 1000 &")
	if _, err := s.Run(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	res, err := s.Run(context.Background(), cmdJob("sh", "-c", "cat state.txt; ps -e -o comm= 2>/dev/null || ls /proc"))
	if err != nil || !strings.HasPrefix(res.Stdout, "kept\n") {
		t.Fatalf("scratch did not persist: %v (%+v)", err, res)
	}
	if strings.Contains(res.Stdout, "sleep") {
		t.Fatalf("a previous run's background process survived: %q", res.Stdout)
	}
	// Limits are per run: a low file limit does not stick to the session.
	for _, n := range []int64{32, 512, 64} {
		j := cmdJob("sh", "-c", "ulimit -n")
		j.Limits.Files = n
		res, err := s.Run(context.Background(), j)
		if err != nil || strings.TrimSpace(res.Stdout) != itoa(int(n)) {
			t.Fatalf("files limit %d: got %v (%+v)", n, err, res)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s.Run(context.Background(), cmdJob("true")); !sessionEnded(err) {
		t.Fatalf("run after close: want the session ended, got %v", err)
	}
}

// TestCloseEndsSessions: closing the tier destroys its open sessions.
func TestCloseEndsSessions(t *testing.T) {
	tier := newTier(t, NewConfig())
	s, err := tier.OpenSession(context.Background(), airlock.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := tier.Close(); err != nil {
		t.Fatal(err)
	}
	checkNoLeftovers(t, tier)
	if _, err := s.Run(context.Background(), cmdJob("true")); !sessionEnded(err) {
		t.Fatalf("run after the tier closed: want the session ended, got %v", err)
	}
}

func TestSessionTTL(t *testing.T) {
	s := openSession(t, airlock.SessionOptions{TTL: 300 * time.Millisecond})
	if _, err := s.Run(context.Background(), cmdJob("true")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := s.Run(context.Background(), cmdJob("true"))
		if sessionEnded(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("session still open long after its TTL: %v", err)
		}
		time.Sleep(400 * time.Millisecond)
	}
}

// TestNoLeaks runs many jobs, cold and pooled, including timeouts, output
// floods and cancellations; newTier's clean-up then checks that no sandbox,
// directory, cgroup, runsc process or mount is left.
func TestNoLeaks(t *testing.T) {
	tier := newTier(t, NewConfig().WithPool(1, 1))
	jobs := []func() (airlock.Job, context.Context){
		func() (airlock.Job, context.Context) { return cmdJob("true"), context.Background() },
		func() (airlock.Job, context.Context) {
			j := cmdJob("sh", "-c", "sleep 100 & while :; do :; done")
			j.Limits.WallMS = 200
			return j, context.Background()
		},
		func() (airlock.Job, context.Context) {
			j := cmdJob("sh", "-c", "yes")
			j.Limits.OutputBytes = 1000
			return j, context.Background()
		},
		func() (airlock.Job, context.Context) {
			ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
			t.Cleanup(cancel)
			return cmdJob("sleep", "100"), ctx
		},
	}
	for i := range 16 {
		job, ctx := jobs[i%len(jobs)]()
		if _, err := tier.Run(ctx, job); err != nil && i%len(jobs) == 0 {
			t.Fatalf("run %d: %v", i, err)
		}
	}
}

// TestSweep simulates a crashed airlock: the sandbox of a tier whose
// process died is still running; a new tier in the same directory sweeps
// it away, with its directory, cgroups, root and lock file. Leftovers named
// as earlier versions named them are swept by PID.
func TestSweep(t *testing.T) {
	dir := t.TempDir()
	crashed, err := New(NewConfig().WithDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	if err := crashed.Available(); err != nil {
		tiertest.Unavailable(t, Name, err)
	}
	sb, err := crashed.newAgentSandbox(modeOnce, airlock.FSGrant{}, nil, func() {})
	if err != nil {
		t.Fatal(err)
	}
	sb.conn.Close()
	if err := os.MkdirAll(crashed.agentLibHost(), 0o755); err != nil {
		t.Fatal(err)
	}
	crash(crashed) // nothing destroys the sandbox
	if !exists(filepath.Join(cgroupRoot, "memory", sb.id)) {
		t.Fatal("test sandbox has no cgroup")
	}
	// An earlier version's directories: one of a dead process, one of a
	// live one (PID 1).
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	legacyDead := filepath.Join(crashed.base, "sb", idPrefix+itoa(dead.Process.Pid)+"-0123456789ab")
	legacyLive := filepath.Join(crashed.base, "sb", idPrefix+"1-0123456789ab")
	for _, d := range []string{legacyDead, legacyLive} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	// What runsc leaves of a sandbox that died before it was saved: a lock
	// file and a socket it no longer lists. The crashed owner's go; a live
	// process's stay.
	deadID := crashed.owner + "-99" + idEnd
	liveID := idPrefix + "1-0123456789ab"
	debris := []string{deadID + "_sandbox:" + deadID + ".lock", "runsc-" + deadID + ".sock"}
	kept := filepath.Join(crashed.state, "runsc-"+liveID+".sock")
	for _, p := range append(debris, filepath.Base(kept)) {
		if err := os.WriteFile(filepath.Join(crashed.state, p), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tier, err := New(NewConfig().WithDir(dir)) // sweeps
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tier.Close(); checkNoLeftovers(t, tier) })
	if out, _ := tier.runscOut(context.Background(), "list", "-quiet"); strings.Contains(string(out), sb.id) {
		t.Fatalf("crashed owner's sandbox still listed: %s", out)
	}
	for _, p := range []string{sb.dir, filepath.Join(cgroupRoot, "memory", sb.id), filepath.Join(cgroupRoot, "pids", sb.id),
		crashed.ownDir(), crashed.lease.Path(), legacyDead, filepath.Join(crashed.state, debris[0]), filepath.Join(crashed.state, debris[1])} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s survived the sweep", p)
		}
	}
	if !exists(legacyLive) || !exists(kept) {
		t.Error("the sweep removed what a live process (legacy name) holds")
	}
	os.Remove(legacyLive)
	os.Remove(kept)
}

// TestWaitWarm checks that WaitWarm returns only once the pool is full,
// honours its context while the pool refills, and returns at once without
// a pool.
func TestWaitWarm(t *testing.T) {
	if err := newTier(t, NewConfig()).WaitWarm(context.Background()); err != nil {
		t.Fatalf("no pool: %v", err)
	}
	tier := newTier(t, NewConfig().WithPool(2, 1))
	warm(t, tier) // fails unless Ready == Size on return
	sb, ok := tier.pool.Claim(poolKey{}, nil)
	if !ok {
		t.Fatal("a full pool gave no sandbox")
	}
	tier.destroyLater(sb)
	// The filler needs hundreds of milliseconds to create a sandbox: an
	// already-cancelled wait must not report the pool full.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := tier.WaitWarm(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait on a refilling pool: %v (stats %+v)", err, tier.Stats())
	}
	warm(t, tier)
	tier.Close()
	if err := tier.WaitWarm(context.Background()); !errors.Is(err, errPoolClosed) {
		t.Fatalf("wait on a closed pool: %v", err)
	}
}

// TestSessionRefusesScratchCap: a session's sandbox was made without a
// scratch cap (a mount option, fixed at its start), so a run asking for
// one cannot have it: it is refused, not run with a scratch that takes
// far more than the job's grants.fs.scratch_mb says it may write.
func TestSessionRefusesScratchCap(t *testing.T) {
	s := openSession(t, airlock.SessionOptions{})
	j := cmdJob("sh", "-c", "dd if=/dev/zero of=big bs=1M count=4 2>/dev/null && echo wrote 4 MiB")
	j.Grants.FS.ScratchMB = 1
	res, err := s.Run(context.Background(), j)
	var na *airlock.NotAdmitted
	if !errors.As(err, &na) {
		t.Fatalf("a 1 MB scratch cap in a session: %v, stdout %q", err, res.Stdout)
	}
	// The session goes on.
	if res, err := s.Run(context.Background(), cmdJob("echo", "on")); err != nil || res.Stdout != "on\n" {
		t.Fatalf("the session after the refusal: %v %+v", err, res)
	}
}
