package microvm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/testing/imagetest"
	"github.com/airlock-sandbox/airlock/internal/testing/tiertest"
	"github.com/airlock-sandbox/airlock/tiers/internal/frame"
	"github.com/airlock-sandbox/airlock/tiers/microvm/internal/wire"
)

func command(argv ...string) airlock.Job {
	return airlock.Job{Kind: airlock.KindCommand, Argv: argv}
}

func ptr(j airlock.Job) *airlock.Job { return &j }

func TestConformance(t *testing.T) {
	tier := shared.get(t, WarmSnapshot)
	// A VM the pool is still starting holds goroutines of its own; count
	// from a full pool.
	if err := tier.WaitWarm(context.Background()); err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	tiertest.Suite{
		Tier: tier,
		OK:   command("sh", "-c", "echo ok"),
		Check: func(t testing.TB, res airlock.Result) {
			if res.Stdout != "ok\n" || res.ExitCode != 0 {
				t.Errorf("OK job: stdout %q exit %d", res.Stdout, res.ExitCode)
			}
		},
		Spin:        ptr(command("sh", "-c", "while :; do :; done")),
		Flood:       ptr(command("yes", "flood")),
		Env:         ptr(command("sh", "-c", "echo $"+tiertest.CanaryEnv+"; cat /proc/1/environ")),
		Bulk:        ptr(command("head", "-c", "60000", "/dev/zero")),
		BulkBytes:   60_000,
		Concurrency: 2,
		OKWall:      2 * time.Minute,
	}.Run(t)
	tiertest.NoGoroutineLeak(t, before)
	assertNoVMs(t, tier)
}

// TestColdBoot boots a VM from scratch, as `airlock run --tier microvm`
// does, and checks the job ran on the guest kernel, as the unprivileged
// job user, in the scratch, on a read-only root.
func TestColdBoot(t *testing.T) {
	tier := shared.get(t, WarmCold)
	job := command("sh", "-c", "echo hi; uname -r; id -u; pwd; touch /etc/x 2>/dev/null || echo ro")
	job.Grants.Spawn = true
	res, err := tier.Run(context.Background(), job)
	if err != nil {
		t.Fatalf("%v (%+v)", err, res)
	}
	want := "hi\n" + tier.GuestKernel() + "\n65534\n/scratch\nro\n"
	if res.Stdout != want {
		t.Fatalf("stdout %q, want %q (stderr %q)", res.Stdout, want, res.Stderr)
	}
	if host, _ := os.ReadFile("/proc/sys/kernel/osrelease"); strings.TrimSpace(string(host)) == tier.GuestKernel() {
		t.Logf("note: host and guest kernels have the same release %s", tier.GuestKernel())
	}
	if res.Timings.StartUS <= 0 || res.Timings.RunUS <= 0 {
		t.Fatalf("timings not recorded: %+v", res.Timings)
	}
	assertNoVMs(t, tier)
}

// assertNoVMs checks that no VM directory of the tier is left behind once
// its used VMs have been reaped.
func assertNoVMs(t *testing.T, tier *Tier) {
	t.Helper()
	tier.reapers.Wait()
	ents, _ := os.ReadDir(tier.cfg.stateDir)
	if n := countVMDirs(ents); n != 0 {
		t.Errorf("%d VM directories left behind", n)
	}
}

func TestAdmit(t *testing.T) {
	tier := shared.get(t, WarmCold)
	cases := map[string]struct {
		job  airlock.Job
		want string
	}{
		"expr":      {airlock.Job{Kind: airlock.KindExpr, Code: "1"}, "command"},
		"read-root": {airlock.Job{Kind: airlock.KindCommand, Argv: []string{"true"}, Grants: airlock.Grants{FS: airlock.FSGrant{Read: []string{"/"}}}}, "would replace the job's root"},
		"lifecycle": {airlock.Job{Kind: airlock.KindCommand, Argv: []string{"true"}, Lifecycle: airlock.LifecycleSession, Session: "s"}, "ephemeral"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			err := tier.Admit(c.job)
			var na *airlock.NotAdmitted
			if !errors.As(err, &na) || na.Tier != Name || !strings.Contains(na.Reason, c.want) {
				t.Fatalf("Admit = %v, want *NotAdmitted mentioning %q", err, c.want)
			}
			res, err := tier.Run(context.Background(), c.job)
			if !errors.As(err, &na) || res.Error == nil || res.Error.Kind != airlock.ErrNotAdmitted {
				t.Fatalf("Run = %v / %+v, want not admitted", err, res.Error)
			}
		})
	}
	ok := command("true")
	if n := testing.AllocsPerRun(100, func() { _ = tier.Admit(ok) }); n != 0 {
		t.Fatalf("Admit allocates %v times on success", n)
	}
}

func TestConfig(t *testing.T) {
	bad := map[string]Config{
		"warm":  DefaultConfig().WithWarm("lukewarm"),
		"pool":  DefaultConfig().WithPool(-1),
		"vcpus": DefaultConfig().WithVCPUs(0),
		"boot":  DefaultConfig().WithBootTimeout(0),
		"accel": DefaultConfig().WithAccel("hvf"),
		// Image pools need a store, a reference and a size in range.
		"image pool, no store": DefaultConfig().WithImagePool("b", 1),
		"image pool, no ref":   DefaultConfig().WithImages(imagetest.New(t)).WithImagePool("", 1),
		"image pool, size":     DefaultConfig().WithImages(imagetest.New(t)).WithImagePool("b", 65),
	}
	for name, c := range bad {
		if _, err := New(c); err == nil {
			t.Errorf("%s: New accepted an invalid config", name)
		}
	}
	a := DefaultConfig()
	b := a.WithVCPUs(2)
	if a.vcpus != 1 || b.vcpus != 2 {
		t.Fatalf("With* changed the original config: %d %d", a.vcpus, b.vcpus)
	}
	if p := a.WithImagePool("b", 1); len(a.imgPools) != 0 || p.WithImagePool("c", 1).imgPools["c"] != 1 || len(p.imgPools) != 1 {
		t.Fatalf("WithImagePool changed its receiver: %v %v", a.imgPools, p.imgPools)
	}
	// Missing assets make the tier unavailable, with the reason, not New fail.
	tier, err := New(testConfig().WithKernel(filepath.Join(t.TempDir(), "no-such-vmlinux")))
	if err != nil {
		t.Fatal(err)
	}
	if err := tier.Available(); err == nil || !strings.Contains(err.Error(), "no-such-vmlinux") {
		t.Fatalf("Available = %v, want it to name the missing kernel", err)
	}
}

// TestAwaitReadyVersion: an agent built from other sources (another
// protocol version, or none) is refused at Ready with a clear message,
// rather than misreading its job; the current version's marks are kept.
func TestAwaitReadyVersion(t *testing.T) {
	for _, c := range []struct {
		ready   string
		reads   bool // the VM was booted with read-grant disks
		copies  bool // one of them a copy grant
		wantErr bool
	}{
		{``, false, false, true},
		{`{"version":1}`, false, false, true},
		{`not json`, false, false, true},
		{fmt.Sprintf(`{"version":%d,"marks":[{"step":"init","us":7}]}`, wire.Version), false, false, false},
		// An agent that does not mount read grants is refused for a VM
		// that has them.
		{fmt.Sprintf(`{"version":%d,"marks":[{"step":"init","us":7}]}`, wire.Version), true, false, true},
		{fmt.Sprintf(`{"version":%d,"marks":[{"step":"init","us":7}],"reads":true}`, wire.Version), true, false, false},
		// One that would show a copy grant read-only is refused for a VM
		// with a copy grant.
		{fmt.Sprintf(`{"version":%d,"marks":[{"step":"init","us":7}],"reads":true}`, wire.Version), true, true, true},
		{fmt.Sprintf(`{"version":%d,"marks":[{"step":"init","us":7}],"reads":true,"copies":true}`, wire.Version), true, true, false},
	} {
		host, guest := net.Pipe()
		go func() { _ = frame.Write(guest, frame.Ready, []byte(c.ready)) }()
		v := &vm{ctl: host, console: &tail{n: 64}, stderr: &tail{n: 64}, reads: c.reads, copies: c.copies}
		err := v.awaitReady(context.Background(), 10*time.Second)
		host.Close()
		guest.Close()
		switch {
		case c.wantErr && (!errors.Is(err, ErrAgentVersion) || !strings.Contains(err.Error(), "rebuild")):
			t.Errorf("Ready %q: %v, want a version refusal", c.ready, err)
		case !c.wantErr && (err != nil || len(v.marks) != 1 || v.marks[0].US != 7):
			t.Errorf("Ready %q: %v, marks %v", c.ready, err, v.marks)
		}
	}
}

// TestStreamsOutput: the first line reaches the sink, forwarded from the
// guest's frames, while the job still runs (a microVM job has no host
// path to wait on, so the test's gate is cancelling the run).
func TestStreamsOutput(t *testing.T) {
	tier := shared.get(t, WarmSnapshot)
	job := command("sh", "-c", "echo first; echo note >&2; i=0; while [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; echo second")
	job.Grants.Spawn = true
	job.Limits.WallMS = 60_000
	res := tiertest.CancelGated(t, tier, job, "first\n")
	if res.Stdout != "first\n" {
		t.Fatalf("stdout %q", res.Stdout)
	}
	assertNoVMs(t, tier)
}
