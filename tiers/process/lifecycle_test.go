package process

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/testing/egresstest"
	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
	"github.com/airlock-sandbox/airlock/internal/testing/tiertest"
	"github.com/airlock-sandbox/airlock/tiers/internal/lease"
)

// TestNothingLeftBehind runs many jobs that end in every way — success,
// timeout, OOM kill, crash, cancellation, output cap, fork bomb, stray
// background processes — and then finds no process, cgroup, mount or
// scratch directory of theirs.
func TestNothingLeftBehind(t *testing.T) {
	kinds := []struct {
		name string
		job  func() airlock.Job
		ctx  func() (context.Context, context.CancelFunc)
	}{
		{"ok", func() airlock.Job { return cmdJob("sh", "-c", "echo fine") }, nil},
		{"timeout", func() airlock.Job {
			j := cmdJob("sh", "-c", "sleep 60 & while :; do :; done")
			j.Limits.WallMS = 300
			return j
		}, nil},
		{"oom", func() airlock.Job {
			j := cmdJob("python3", "-c", "b = b'x' * (256 << 20)")
			j.Limits.MemoryMB = 32
			return j
		}, nil},
		{"crash", func() airlock.Job { return cmdJob("sh", "-c", "sleep 60 & kill -SEGV $$") }, nil},
		{"background", func() airlock.Job {
			return cmdJob("sh", "-c", "(sleep 60 &); setsid sleep 60 & nohup sleep 60 >/dev/null 2>&1 & echo ok")
		}, nil},
		{"cancel", func() airlock.Job { return cmdJob("sleep", "60") }, func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 200*time.Millisecond)
		}},
		{"flood", func() airlock.Job {
			j := cmdJob("sh", "-c", "sleep 60 & yes")
			j.Limits.OutputBytes = 1000
			return j
		}, nil},
		{"forkbomb", func() airlock.Job {
			j := cmdJob("sh", "-c", "b() { b | b; }; b")
			j.Limits.Pids = 16
			return j
		}, nil},
	}
	forBothTiers(t, func(t *testing.T, tier *Tier, cfg Config) {
		var wg sync.WaitGroup
		sem := make(chan struct{}, 4)
		for round := range 3 {
			for _, k := range kinds {
				if only := os.Getenv("AIRLOCK_LEAK_KIND"); only != "" && only != k.name {
					continue
				}
				wg.Add(1)
				sem <- struct{}{}
				go func() {
					defer func() { <-sem; wg.Done() }()
					ctx, cancel := context.Background(), context.CancelFunc(func() {})
					if k.ctx != nil {
						ctx, cancel = k.ctx()
					}
					defer cancel()
					res, err := tier.Run(ctx, k.job())
					if k.name == "ok" && (err != nil || res.Stdout != "fine\n") {
						t.Errorf("round %d ok job: %v %+v", round, err, res)
					}
					for _, d := range res.Decision {
						if strings.HasPrefix(d, "cleanup:") {
							t.Errorf("%s: %s", k.name, d)
						}
					}
				}()
			}
		}
		wg.Wait()
		assertClean(t, tier, cfg)
	})
}

// TestSweep plays a crashed airlock: a cgroup with a live process and a
// scratch mount, both named for an owner pid that no longer runs (as
// earlier versions named them), and a cgroup and scratch directory of an
// owner whose lease is dead, are removed by the start-up sweep; a live
// owner's are left alone.
func TestSweep(t *testing.T) {
	if err := probe(); err != nil {
		tiertest.Unavailable(t, NameContainer, err)
	}
	cfg := testConfig(t)
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	deadName := namePrefix + strconv.Itoa(dead.Process.Pid) + "-0123456789ab"
	cg, err := newJobCgroup(deadName, cgLimits{memoryBytes: 64 << 20, pids: 8}, false)
	if err != nil {
		t.Fatal(err)
	}
	orphan := exec.Command("sleep", "600")
	if err := orphan.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- orphan.Wait() }()
	if err := cg.add(orphan.Process.Pid); err != nil {
		t.Fatal(err)
	}
	scratch := filepath.Join(cfg.baseDir, deadName)
	if err := mountScratch(scratch, 1, 65534); err != nil {
		t.Fatal(err)
	}
	// A crashed airlock's /etc template: its mounts went with its mount
	// namespace; the empty mount point is left on the host.
	template := filepath.Join(cfg.baseDir, deadName+"-etc")
	if err := os.Mkdir(template, 0o755); err != nil {
		t.Fatal(err)
	}
	liveTemplate := filepath.Join(cfg.baseDir, namePrefix+strconv.Itoa(os.Getpid())+"-0123456789ab-etc")
	if err := os.Mkdir(liveTemplate, 0o755); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(liveTemplate)
	liveName := namePrefix + strconv.Itoa(os.Getpid()) + "-ba9876543210"
	live, err := newJobCgroup(liveName, cgLimits{memoryBytes: 64 << 20, pids: 8}, false)
	if err != nil {
		t.Fatal(err)
	}
	defer live.destroy()
	deadOwner, err := lease.Own(owners(cfg.baseDir), namePrefix, os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	deadOwner.Release(false) // as when its process died
	leasedName := deadOwner.Name() + "-0123456789ab"
	leasedCg, err := newJobCgroup(leasedName, cgLimits{memoryBytes: 64 << 20, pids: 8}, false)
	if err != nil {
		t.Fatal(err)
	}
	leasedScratch := filepath.Join(cfg.baseDir, leasedName)
	if err := os.Mkdir(leasedScratch, 0o700); err != nil {
		t.Fatal(err)
	}
	liveLeased := newName(cfg.baseDir)
	liveLeasedCg, err := newJobCgroup(liveLeased, cgLimits{memoryBytes: 64 << 20, pids: 8}, false)
	if err != nil {
		t.Fatal(err)
	}
	defer liveLeasedCg.destroy()
	liveLeasedDir := filepath.Join(cfg.baseDir, liveLeased)
	if err := os.Mkdir(liveLeasedDir, 0o700); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(liveLeasedDir)

	if err := Sweep(cfg.baseDir); err != nil {
		t.Fatalf("sweep: %v", err)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		orphan.Process.Kill()
		t.Fatal("the orphan in a crashed airlock's cgroup survived the sweep")
	}
	found := map[string]bool{}
	for _, n := range leftoverCgroups() {
		found[n] = true
	}
	if found[deadName] {
		t.Error("the crashed airlock's cgroup survived the sweep")
	}
	if !found[liveName] || !found[liveLeased] {
		t.Error("the sweep removed a live owner's cgroup")
	}
	if found[leasedName] {
		_ = leasedCg.destroy()
		t.Error("the cgroup of an owner whose lease is dead survived the sweep")
	}
	for _, p := range []string{leasedScratch, deadOwner.Path()} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("the dead lease's %s survived the sweep: %v", p, err)
		}
	}
	if _, err := os.Stat(liveLeasedDir); err != nil {
		t.Errorf("the sweep removed a live owner's scratch directory: %v", err)
	}
	if m := leftoverMounts(cfg.baseDir); len(m) > 0 {
		t.Errorf("the crashed airlock's scratch mount survived the sweep: %v", m)
	}
	if _, err := os.Stat(scratch); !os.IsNotExist(err) {
		t.Errorf("the crashed airlock's scratch directory survived the sweep: %v", err)
	}
	if _, err := os.Stat(template); !os.IsNotExist(err) {
		t.Errorf("the crashed airlock's /etc template survived the sweep: %v", err)
	}
	if _, err := os.Stat(liveTemplate); err != nil {
		t.Errorf("the sweep removed a live owner's /etc template: %v", err)
	}
}

func TestSessions(t *testing.T) {
	forBothTiers(t, func(t *testing.T, tier *Tier, cfg Config) {
		ctx := context.Background()
		run := func(s airlock.Session, job airlock.Job) airlock.Result {
			t.Helper()
			res, err := s.Run(ctx, job)
			if err != nil {
				t.Fatalf("%v: %v %+v", job.Argv, err, res)
			}
			return res
		}

		t.Run("ScratchKeptAcrossRuns", func(t *testing.T) {
			s, err := tier.OpenSession(ctx, airlock.SessionOptions{})
			if err != nil {
				t.Fatal(err)
			}
			run(s, cmdJob("sh", "-c", "echo one > state.txt; sleep 60 &"))
			if res := run(s, cmdJob("sh", "-c", "cat state.txt; ps -e -o comm= 2>/dev/null | grep -c sleep || true")); !strings.HasPrefix(res.Stdout, "one\n") {
				t.Fatalf("second run sees %q, want the first run's file", res.Stdout)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Run(ctx, cmdJob("true")); err == nil {
				t.Fatal("a closed session ran a job")
			}
		})

		t.Run("SymlinkSwapBetweenRuns", func(t *testing.T) {
			target, err := os.MkdirTemp("", "airlock-swap-")
			if err != nil {
				t.Fatal(err)
			}
			defer os.RemoveAll(target)
			os.Chmod(target, 0o777)
			s, err := tier.OpenSession(ctx, airlock.SessionOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			run(s, cmdJob("ln", "-s", target, "out"))
			job := cmdJob("true")
			job.Files = map[string]string{"out/planted.txt": "x"}
			if _, err := s.Run(ctx, job); err == nil {
				t.Error("placing a file through a symlink the previous run left succeeded")
			}
			if _, err := os.Stat(filepath.Join(target, "planted.txt")); err == nil {
				t.Fatal("a job file was placed outside the scratch through a symlink")
			}
		})

		t.Run("PersistentWorkspace", func(t *testing.T) {
			name := fmt.Sprintf("ws-%s-%d", tier.Name(), time.Now().UnixNano())
			s1, err := tier.OpenSession(ctx, airlock.SessionOptions{Workspace: name})
			if err != nil {
				t.Fatal(err)
			}
			run(s1, cmdJob("sh", "-c", "echo kept >> notes.txt"))
			s1.Close()
			s2, err := tier.OpenSession(ctx, airlock.SessionOptions{Workspace: name})
			if err != nil {
				t.Fatal(err)
			}
			defer s2.Close()
			if res := run(s2, cmdJob("sh", "-c", "echo again >> notes.txt; cat notes.txt")); res.Stdout != "kept\nagain\n" {
				t.Fatalf("reattached workspace holds %q", res.Stdout)
			}
			if _, err := tier.OpenSession(ctx, airlock.SessionOptions{Workspace: "../escape"}); err == nil {
				t.Fatal("a workspace name with a path was accepted")
			}
		})
		assertClean(t, tier, cfg)
	})
}

// TestPoolBindsAtClaim shows that a pooled sandbox takes the claiming
// job's secrets and limits, and is never used twice.
func TestPoolBindsAtClaim(t *testing.T) {
	cfg := testConfig(t).WithPool(2)
	tier := newTestTier(t, bothTiers[0], cfg)
	waitPool := func() {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for tier.PoolStats().Ready < 2 {
			if time.Now().After(deadline) {
				t.Fatal("pool did not fill")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	ctx := context.Background()
	for i, who := range []string{"alpha", "beta"} {
		waitPool()
		before := tier.PoolStats().Hits
		job := cmdJob("sh", "-c", "echo $WHO; ulimit -n; ls; echo used > marker")
		job.Grants.Secrets = map[string]string{"WHO": who}
		job.Limits.Files = int64(100 * (i + 1))
		res, err := tier.Run(ctx, job)
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("%s\n%d\n", who, 100*(i+1)); res.Stdout != want {
			t.Fatalf("pooled run printed %q, want %q (no marker from an earlier job)", res.Stdout, want)
		}
		if tier.PoolStats().Hits != before+1 {
			t.Fatal("the job did not run in a pooled sandbox")
		}
	}
	waitPool()
	job := cmdJob("python3", "-c", "b = b'x' * (256 << 20)")
	job.Limits.MemoryMB = 32
	_, err := tier.Run(ctx, job)
	wantStop(t, err, airlock.StopMemory)
	assertClean(t, tier, cfg)
}

var _ = syscall.Getpid

// TestPlacedCheck shows the placed files are inspected before the program
// runs, and that a refusal stops the run.
func TestPlacedCheck(t *testing.T) {
	forBothTiers(t, func(t *testing.T, tier *Tier, cfg Config) {
		job := cmdJob("sh", "-c", "cat a/b.txt; echo ran > ran.txt")
		job.Files = map[string]string{"a/b.txt": "placed"}
		var seen string
		ok := airlock.WithPlacedCheck(context.Background(), func(dir string) error {
			data, err := os.ReadFile(filepath.Join(dir, "a/b.txt"))
			seen = string(data)
			if _, err := os.Stat(filepath.Join(dir, "ran.txt")); err == nil {
				return fmt.Errorf("the program ran before the check")
			}
			return err
		})
		res, err := tier.Run(ok, job)
		if err != nil || res.Stdout != "placed" || seen != "placed" {
			t.Fatalf("check saw %q; run: %v %+v", seen, err, res)
		}
		refuse := airlock.WithPlacedCheck(context.Background(), func(string) error { return fmt.Errorf("digest mismatch") })
		res, err = tier.Run(refuse, job)
		if err == nil || !strings.Contains(err.Error(), "digest mismatch") || res.Stdout != "" {
			t.Fatalf("a refused check must stop the run before it starts: %v %+v", err, res)
		}
		// No files: the check runs on the fresh, empty scratch before the
		// stage is told to start, and a refusal still stops the run.
		bare := cmdJob("sh", "-c", "echo ran")
		var checked []string
		empty := airlock.WithPlacedCheck(context.Background(), func(dir string) error {
			entries, err := os.ReadDir(dir)
			for _, e := range entries {
				checked = append(checked, e.Name())
			}
			return err
		})
		if res, err = tier.Run(empty, bare); err != nil || res.Stdout != "ran\n" || len(checked) != 0 {
			t.Fatalf("no files: check saw %v; run: %v %+v", checked, err, res)
		}
		if res, err = tier.Run(refuse, bare); err == nil || !strings.Contains(err.Error(), "digest mismatch") || res.Stdout != "" {
			t.Fatalf("no files: a refused check must stop the run before it starts: %v %+v", err, res)
		}
		assertClean(t, tier, cfg)
	})
}

// TestPoolClaimRefusedLimits shows that a pooled sandbox whose cgroup
// cannot take the claiming job's limits (v1 refuses a memory limit below
// what the group already holds) is discarded and the job starts cold,
// rather than failing.
func TestPoolClaimRefusedLimits(t *testing.T) {
	if cgroupV2() {
		t.Skip("cgroup v2 lowers memory.max below the usage by reclaiming, it does not refuse it")
	}
	cfg := testConfig(t).WithPool(1)
	tier := newTestTier(t, bothTiers[0], cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := tier.WaitWarm(ctx); err != nil {
		t.Fatal(err)
	}
	// A host process joins the pooled sandbox's cgroup and then touches
	// 16 MiB there, so the group holds more than the claiming job's limit
	// (what an idle stage holds alone depends on when it joined).
	python, err := exec.LookPath("python3")
	if err != nil {
		testenv.Skipf(t, "python3 (scripts/setup-python.sh installs it) is missing: %v", err)
	}
	pooled := pooledSandbox(t, tier)
	hog := exec.Command(python, "-c", "import sys; sys.stdin.readline(); b = b'x' * (16 << 20); print('ready', flush=True); sys.stdin.readline()")
	in, _ := hog.StdinPipe()
	out, _ := hog.StdoutPipe()
	if err := hog.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { in.Close(); _ = hog.Process.Kill(); _ = hog.Wait() }()
	if err := pooled.cg.add(hog.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if _, err := in.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("the memory holder did not start: %q, %v", line, err)
	}
	job := cmdJob("true")
	job.Limits.MemoryMB = 4 // below what the pooled sandbox's group holds
	res, err := tier.Run(ctx, job)
	if tier.PoolStats().Hits != 1 {
		t.Fatalf("the job did not claim the pooled sandbox (claims %d)", tier.PoolStats().Hits)
	}
	if !slices.ContainsFunc(res.Decision, func(d string) bool { return strings.Contains(d, "started cold") }) {
		t.Fatalf("no cold start after the refused claim: err %v, decision %q", err, res.Decision)
	}
	if slices.ContainsFunc(res.Decision, func(d string) bool { return strings.Contains(d, cgroupRoot) }) {
		t.Fatalf("the decision names the host's cgroup paths: %q", res.Decision)
	}
	if err != nil {
		t.Fatalf("the cold start failed: %v", err)
	}
	assertClean(t, tier, cfg)
}

// TestSpareCgroup shows the spare cgroup is handed out once, with the
// taker's limits set, and that close removes it and ends later fills.
func TestSpareCgroup(t *testing.T) {
	if err := probe(); err != nil {
		tiertest.Unavailable(t, "process", err)
	}
	memLimit := func(cg jobCgroup) string {
		var p string
		switch c := cg.(type) {
		case *cgroupV1:
			p = filepath.Join(cgroupRoot, "memory", c.name, "memory.limit_in_bytes")
		case *cgroupV2m:
			p = filepath.Join(cgroupRoot, c.name, "memory.max")
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	var s spareCgroup
	base := testConfig(t).baseDir
	l := cgLimitsFor(airlock.DefaultLimitPolicy().Default)
	s.fill(base, l)
	spare := s.cg
	if spare == nil {
		t.Fatal("fill made no spare")
	}
	l2 := l
	l2.memoryBytes = 64 << 20
	cg := s.take(l2)
	if cg != spare {
		t.Fatal("take did not return the spare")
	}
	if got := memLimit(cg); got != strconv.Itoa(64<<20) {
		t.Fatalf("the spare's memory limit is %s, want the taker's %d", got, 64<<20)
	}
	if s.take(l) != nil {
		t.Fatal("the spare was handed out twice")
	}
	if err := cg.destroy(); err != nil {
		t.Fatal(err)
	}
	s.fill(base, l)
	s.close()
	s.fill(base, l)
	if s.cg != nil {
		t.Fatal("a fill after close made a spare")
	}
	mine := namePrefix + strconv.Itoa(os.Getpid()) + "-"
	for _, name := range leftoverCgroups() {
		if strings.HasPrefix(name, mine) {
			t.Errorf("cgroup %s left behind", name)
		}
	}
}

// TestSpareCgroupUsed shows a tier's next start takes the spare cgroup
// made after its previous sandbox was destroyed.
func TestSpareCgroupUsed(t *testing.T) {
	forBothTiers(t, func(t *testing.T, tier *Tier, cfg Config) {
		run := func() {
			t.Helper()
			if _, err := tier.Run(context.Background(), cmdJob("true")); err != nil {
				t.Fatal(err)
			}
			tier.cleanups.Wait()
		}
		run()
		tier.cgSpare.mu.Lock()
		spare := tier.cgSpare.cg
		tier.cgSpare.mu.Unlock()
		if spare == nil {
			t.Fatal("no spare cgroup after a sandbox was destroyed")
		}
		run()
		tier.cgSpare.mu.Lock()
		next := tier.cgSpare.cg
		tier.cgSpare.mu.Unlock()
		if next == nil || next == spare {
			t.Fatal("the second start did not take the spare")
		}
		assertClean(t, tier, cfg)
	})
}

// TestStageJoinsCgroup: a start that goes straight on to its job (a cold
// container, a level-2 start) hands the stage its cgroup's per-thread
// membership files, and the stage moves its own thread in before anything
// else, instead of the parent writing its pid to cgroup.procs (see
// stage.BaseSpec.CgroupFds). Seen from the host while the program runs:
// the stage and the program are in the job's group in every hierarchy,
// and the stage's runtime thread that started before the join is not —
// which only a per-thread move leaves behind, not the parent's move of
// the whole process.
func TestStageJoinsCgroup(t *testing.T) {
	if err := probe(); err != nil {
		tiertest.Unavailable(t, "process", err)
	}
	if cgroupV2() {
		t.Skip("cgroup v2: a process's threads cannot be split between groups, so the parent moves the stage in")
	}
	forBothTiers(t, func(t *testing.T, tier *Tier, cfg Config) {
		if _, err := tier.Run(context.Background(), cmdJob("true")); err != nil {
			t.Fatal(err)
		}
		tier.cleanups.Wait()
		tier.cgSpare.mu.Lock()
		spare, _ := tier.cgSpare.cg.(*cgroupV1)
		tier.cgSpare.mu.Unlock()
		if spare == nil || spare.joinFiles() == nil {
			t.Fatal("no spare cgroup with join files after a sandbox was destroyed")
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		go func() {
			_, err := tier.Run(ctx, cmdJob("sleep", "30"))
			done <- err
		}()
		want := "/" + spare.name
		groups := func(file string) map[string]string {
			b, err := os.ReadFile(file)
			if err != nil {
				return nil
			}
			m := map[string]string{}
			for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				parts := strings.SplitN(line, ":", 3)
				if len(parts) == 3 {
					for _, c := range strings.Split(parts[1], ",") {
						m[c] = parts[2]
					}
				}
			}
			return m
		}
		var pids []int
		for deadline := time.Now().Add(10 * time.Second); len(pids) < 2; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the job's group holds %v, want the stage and the program", pids)
			}
			pids, _ = readPids(spare.file("pids", "cgroup.procs"))
		}
		outside := 0
		for _, pid := range pids {
			g := groups(fmt.Sprintf("/proc/%d/cgroup", pid))
			for _, s := range v1Subsystems {
				if g[string(s)] != want {
					t.Errorf("pid %d: %s group %q, want %q", pid, s, g[string(s)], want)
				}
			}
			tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
			for _, task := range tasks {
				if groups(fmt.Sprintf("/proc/%d/task/%s/cgroup", pid, task.Name()))["pids"] != want {
					outside++
				}
			}
		}
		if outside == 0 {
			t.Error("every thread of the stage is in the job's group: the parent moved the whole process, the stage did not join by itself")
		}
		cancel()
		if err := <-done; err == nil {
			t.Fatal("a cancelled job reported success")
		}
		assertClean(t, tier, cfg)
	})
}

// TestSessionScratchInodesBounded: a session's scratch is a tmpfs that
// outlives each run's cgroup, so the kernel memory its inodes hold is
// charged to a run that is gone once the next begins. Empty files take no
// page of the tmpfs's size: without a bound on its inodes, run after run
// could fill the host's memory with them, each run within its own limit.
// The scratch takes at most two inodes per 4 KiB page of its size.
func TestSessionScratchInodesBounded(t *testing.T) {
	egresstest.NeedTools(t, "python3")
	forBothTiers(t, func(t *testing.T, tier *Tier, cfg Config) {
		ctx := context.Background()
		s, err := tier.OpenSession(ctx, airlock.SessionOptions{})
		if err != nil {
			t.Fatal(err)
		}
		const fill = `import os, sys
n = 0
try:
    while n < 25000:
        os.close(os.open("f%s-%d" % (sys.argv[1], n), os.O_CREAT | os.O_WRONLY)); n += 1
except OSError as e:
    print(n, e.errno); sys.exit(0)
print(n, 0)
`
		total := 0
		for i := range 6 {
			job := cmdJob("python3", "-c", fill, strconv.Itoa(i))
			job.Limits.MemoryMB = 64
			res, err := s.Run(ctx, job)
			if err != nil {
				t.Fatalf("run %d: %v (%q)", i, err, res.Stderr)
			}
			var made, errno int
			if _, err := fmt.Sscan(res.Stdout, &made, &errno); err != nil {
				t.Fatalf("run %d said %q, %q", i, res.Stdout, res.Stderr)
			}
			total += made
			if errno != 0 && errno != int(syscall.ENOSPC) {
				t.Fatalf("run %d: errno %d after %d files", i, errno, made)
			}
		}
		if most := DefaultScratchMB * 512; total > most {
			t.Errorf("the %d MiB session scratch took %d empty files over 6 runs of 64 MiB each (at most %d)", DefaultScratchMB, total, most)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		assertClean(t, tier, cfg)
	})
}

// TestFilterHidesOtherProcesses: a level-2 program shares the host's PID
// namespace, but sees only its own processes in /proc: not the command
// line of another job's program (a level-3 container's, here), nor the
// host's processes, while its own children stay visible.
func TestFilterHidesOtherProcesses(t *testing.T) {
	cfg := testConfig(t)
	container := newTestTier(t, bothTiers[0], cfg)
	filter := newTestTier(t, bothTiers[1], cfg)
	done := make(chan struct{})
	go func() {
		defer close(done)
		job := cmdJob("sh", "-c", "sleep 30; : other-jobs-marker")
		job.Limits.WallMS = 60_000
		_, _ = container.Run(context.Background(), job)
	}()
	sentinel := exec.Command("sleep", "60")
	if err := sentinel.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sentinel.Process.Kill(); sentinel.Wait() }()
	// Wait until the container's shell runs.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the container's program did not start")
		}
		out, _ := exec.Command("pgrep", "-f", "other-jobs-marker").Output()
		if len(out) > 0 {
			break
		}
	}
	res, err := filter.Run(context.Background(), cmdJob("sh", "-c",
		`sleep 5 & for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' < $f 2>/dev/null; echo; done; echo sentinel=$(test -e /proc/`+strconv.Itoa(sentinel.Process.Pid)+` && echo seen); kill $!`))
	if err != nil {
		t.Fatalf("%v (%q)", err, res.Stderr)
	}
	if strings.Contains(res.Stdout, "other-jobs-marker") {
		t.Errorf("a level-2 job read another job's command line:\n%s", res.Stdout)
	}
	if strings.Contains(res.Stdout, "sentinel=seen") {
		t.Errorf("a level-2 job sees a host process (pid %d)", sentinel.Process.Pid)
	}
	if !strings.Contains(res.Stdout, "sleep 5") {
		t.Errorf("a level-2 job does not see its own child:\n%s", res.Stdout)
	}
	filter.Close()
	container.Close() // ends the waiting job
	<-done
	assertClean(t, container, cfg)
	assertClean(t, filter, cfg)
}

// TestFilterStageKeepsNoCapability: to seal a program without spawn, one
// thread of the level-2 stage keeps CAP_SYS_ADMIN across its change to
// the job's uid; by the time the program runs, no thread of the stage
// holds any capability, nor does the program.
func TestFilterStageKeepsNoCapability(t *testing.T) {
	filter := newTestTier(t, bothTiers[1], testConfig(t))
	done := make(chan error, 1)
	go func() {
		job := airlock.Job{Kind: airlock.KindCommand, Argv: []string{"./wait.py"},
			Files:  map[string]string{"wait.py": "#!/usr/bin/python3\nimport time\ntime.sleep(3) # nocap-marker\n"},
			Limits: airlock.Limits{WallMS: 30_000}}
		res, err := filter.Run(context.Background(), job)
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("exit %d: %s", res.ExitCode, res.Stderr)
		}
		done <- err
	}()
	var prog int
	for deadline := time.Now().Add(20 * time.Second); prog == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the program did not start")
		}
		out, _ := exec.Command("pgrep", "-f", "wait.py").Output()
		for _, f := range strings.Fields(string(out)) {
			if pid, _ := strconv.Atoi(f); pid != os.Getpid() {
				prog = pid
			}
		}
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", prog))
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	stagePid := fields[1]
	tasks, _ := filepath.Glob("/proc/" + stagePid + "/task/*/status")
	tasks = append(tasks, fmt.Sprintf("/proc/%d/status", prog))
	if len(tasks) < 2 {
		t.Fatalf("no threads found for the stage %s", stagePid)
	}
	for _, f := range tasks {
		data, err := os.ReadFile(f)
		if err != nil {
			continue // a thread that ended
		}
		for _, line := range strings.Split(string(data), "\n") {
			k, v, _ := strings.Cut(line, ":")
			if (k == "CapPrm" || k == "CapEff") && strings.TrimSpace(v) != "0000000000000000" {
				t.Errorf("%s: %s %s", f, k, strings.TrimSpace(v))
			}
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
