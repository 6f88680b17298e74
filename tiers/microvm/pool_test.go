package microvm

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/testing/tiertest"
	"github.com/airlock-sandbox/airlock/tiers/microvm/internal/wire"
)

// TestPool claims pre-booted VMs: the job's policy (a secret, a memory
// limit, the clock) is bound at claim time, each VM serves one job and is
// destroyed, and two claims get two different VMs.
func TestPool(t *testing.T) {
	tier, err := New(testConfig().WithPool(1).WithStateDir(t.TempDir())) // its own: nothing but its VMs there
	if err != nil {
		t.Fatal(err)
	}
	defer tier.Close()
	if err := tier.Available(); err != nil {
		tiertest.Unavailable(t, Name, err)
	}
	var warmed []bool // per used VM: did its agent warm up before Ready?
	tier.observe = func(marks []wire.Mark) {
		warmed = append(warmed, slices.ContainsFunc(marks, func(m wire.Mark) bool { return m.Step == "warmup" }))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	job := command("sh", "-c", `read m < /sys/fs/cgroup/job/memory.max; read b < /proc/sys/kernel/random/boot_id; echo "$TOKEN $m $b"`)
	job.Grants.Secrets = map[string]string{"TOKEN": "claim-time-secret"}
	job.Limits.MemoryMB = 48
	job.Clock = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	var boots []string
	for i := range 2 {
		if err := tier.WaitWarm(ctx); err != nil {
			t.Fatal(err)
		}
		if n := tier.PoolStats().Ready; n != 1 {
			t.Fatalf("WaitWarm returned with %d VMs waiting, want 1", n)
		}
		// A full pool boots nothing more: no VM waits outside it (whose
		// successor's boot would start at the next claim).
		time.Sleep(300 * time.Millisecond)
		tier.reapers.Wait()
		ents, _ := os.ReadDir(tier.cfg.stateDir)
		if n := countVMDirs(ents); n != 1 {
			t.Fatalf("a full pool of one has %d VMs", n)
		}
		res, err := tier.Run(ctx, job)
		if err != nil {
			t.Fatalf("run %d: %v (%+v)", i, err, res)
		}
		f := strings.Fields(res.Stdout)
		if len(f) != 3 || f[0] != "claim-time-secret" || f[1] != "50331648" {
			t.Fatalf("run %d: the job's policy was not applied at claim: %q", i, res.Stdout)
		}
		if hits := tier.PoolStats().Hits; hits != uint64(i+1) {
			t.Fatalf("run %d did not come from the pool (hits %d)", i, hits)
		}
		boots = append(boots, f[2])
	}
	if boots[0] == boots[1] {
		t.Fatalf("two claims ran in the same VM (boot id %s)", boots[0])
	}
	if !slices.Equal(warmed, []bool{true, true}) {
		t.Fatalf("pooled VMs warmed up before Ready: %v, want both", warmed)
	}
	// A job bigger than the pooled VMs is not served from the pool.
	big := command("true")
	big.Limits.MemoryMB = airlock.DefaultLimitPolicy().Default.MemoryMB * 2
	if v := tier.claim(memFor(mustPrepare(t, big)), ""); v != nil {
		v.kill()
		t.Fatal("a pooled VM was handed a job larger than it")
	}
	tier.Close()
	ents, _ := os.ReadDir(tier.cfg.stateDir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), vmNamePrefix) {
			t.Fatalf("left after Close: %s", e.Name())
		}
	}
	// A closed pool never fills again: WaitWarm says so instead of blocking.
	if err := tier.WaitWarm(ctx); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("WaitWarm on a closed pool: %v", err)
	}
}

// TestWaitWarm covers the tiers without a pool: cold starts have nothing
// to wait for, snapshot starts wait for the snapshot, and a tier that
// cannot run says why.
func TestWaitWarm(t *testing.T) {
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if err := shared.get(t, WarmCold).WaitWarm(done); err != nil {
		t.Fatalf("cold, no pool: WaitWarm = %v, want nil at once", err)
	}
	snap := shared.get(t, WarmSnapshot)
	if err := snap.WaitWarm(context.Background()); err != nil {
		t.Fatal(err)
	}
	snap.snapMu.Lock()
	s := snap.snaps[vmKey{mem: snap.baseMem()}]
	snap.snapMu.Unlock()
	if s == nil {
		t.Fatal("WaitWarm returned before the snapshot existed")
	}
	if err := s.check(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	missing, err := New(testConfig().WithKernel(filepath.Join(t.TempDir(), "no-vmlinux")))
	if err != nil {
		t.Fatal(err)
	}
	if err := missing.WaitWarm(context.Background()); err == nil {
		t.Fatal("WaitWarm on a tier without its kernel returned nil")
	}
}

func countVMDirs(ents []os.DirEntry) int {
	n := 0
	for _, e := range ents {
		// The spare VMM and the empty placed-files directory are the
		// tier's own state, removed by Close (TestSpareVMM); everything
		// else is a VM's (or a run's placed files).
		if strings.HasPrefix(e.Name(), vmNamePrefix) && !strings.HasPrefix(e.Name(), vmNamePrefix+spareID) &&
			!strings.HasPrefix(e.Name(), vmNamePrefix+"empty-") {
			n++
		}
	}
	return n
}
