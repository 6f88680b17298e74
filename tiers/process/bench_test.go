package process

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/internal/testing/egresstest"
	"github.com/airlock-sandbox/airlock/internal/testing/imagetest"
	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
	"github.com/airlock-sandbox/airlock/internal/testing/tiertest"
	"github.com/airlock-sandbox/airlock/internal/tools"
	"github.com/airlock-sandbox/airlock/interp/expr"
	"github.com/airlock-sandbox/airlock/role"
)

// medianReport runs fn per iteration and reports the median of the
// durations it returns (the docs quote medians as ratios against the raw
// peer of the same run); it also returns the median.
func medianReport(b *testing.B, fn func() (time.Duration, error)) time.Duration {
	b.Helper()
	times := make([]time.Duration, 0, b.N)
	for b.Loop() {
		d, err := fn()
		if err != nil {
			b.Fatal(err)
		}
		times = append(times, d)
	}
	m := median(times)
	b.ReportMetric(float64(m.Nanoseconds())/1000, "median-µs")
	return m
}

func median(times []time.Duration) time.Duration {
	if len(times) == 0 {
		return 0
	}
	slices.Sort(times)
	return times[len(times)/2]
}

// timed times fn.
func timed(fn func() error) func() (time.Duration, error) {
	return func() (time.Duration, error) {
		start := time.Now()
		err := fn()
		return time.Since(start), err
	}
}

// medians collects the sub-benchmarks' medians of one run, to report them
// as ratios against the raw peers measured in the same run.
type medians map[string]time.Duration

// ratios logs each median against each named base, e.g.
// "process 14.2 ms = 1.31 × bwrap".
func (m medians) ratios(b *testing.B, bases ...string) {
	b.Helper()
	for _, name := range slices.Sorted(maps.Keys(m)) {
		line := fmt.Sprintf("%-16s %10.3f ms", name, float64(m[name].Microseconds())/1000)
		for _, base := range bases {
			if d, ok := m[base]; ok && d > 0 && base != name {
				line += fmt.Sprintf("  %8.2f × %s", float64(m[name])/float64(d), base)
			}
		}
		b.Log(line)
	}
}

// warm times fn once the tier's pool is full and idle (waiting untimed),
// so that it measures a claim, not the refill rate.
func warm(b *testing.B, w airlock.Pooler, fn func() error) func() (time.Duration, error) {
	return func() (time.Duration, error) {
		b.StopTimer()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := w.WaitWarm(ctx)
		cancel()
		if err != nil {
			return 0, err
		}
		b.StartTimer()
		return timed(fn)()
	}
}

// bwrapArgs start /bin/true under bwrap with every namespace, a read-only
// /usr, a fresh /proc and /dev and a tmpfs /tmp.
var bwrapArgs = []string{"--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr",
	"--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
	"--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "/bin/true"}

// BenchmarkColdStartPaired starts /bin/true cold, interleaved within each
// iteration (in a new random order each time) so that the host's noise
// falls on all of them alike: bwrap, each tier with the separate stage binary, and each
// tier re-executing this binary as its stage (the fallback; a test binary
// links cgo and more packages than a CGO_ENABLED=0 airlock binary, so this
// is the fallback's worst case). It needs a separate stage binary (built
// by `make setup`, or named by AIRLOCK_AIRLOCK_STAGE). process-direct
// starts its containers from this process rather than through the spawner.
func BenchmarkColdStartPaired(b *testing.B) {
	coldStartPaired(b, 5*time.Millisecond, "-reexec", "-direct")
}

// BenchmarkColdStartIdle is BenchmarkColdStartPaired for bwrap and the
// two tiers only, with 50 ms of idleness before each start, as before a
// caller's occasional start. What the kernel lets go quiet in that time
// falls on every variant: caches, idle CPUs, and the cgroup core's
// "recently written" state, whose loss made moving a process into a
// cgroup wait out an RCU grace period (6–9 ms here) until the stages
// joined their groups themselves (see stage.BaseSpec.CgroupFds). The
// -moved variants are the tiers with the tier moving each stage in, as
// before.
func BenchmarkColdStartIdle(b *testing.B) { coldStartPaired(b, 50*time.Millisecond, "-moved") }

// coldStartPaired runs the paired cold starts, each after idle (untimed):
// bwrap, the two tiers, and the named variants of them (-reexec, -direct,
// -moved).
func coldStartPaired(b *testing.B, idle time.Duration, variants ...string) {
	bwrap, err := tools.Find("bwrap")
	if err != nil {
		testenv.Skipf(b, "bwrap (Debian bubblewrap; scripts/setup.sh installs it) is missing: %v", err)
	}
	sb, err := discoverStage()
	if err != nil {
		b.Fatal(err)
	}
	if !sb.separate() {
		testenv.Skipf(b, "no separate stage binary to compare with: %s", sb.why)
	}
	self, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	job := cmdJob("/bin/true")
	var tiers []*Tier
	names := []string{"bwrap"}
	runs := map[string]func() error{"bwrap": func() error { return exec.Command(bwrap, bwrapArgs...).Run() }}
	for _, tc := range bothTiers {
		for _, v := range []struct {
			suffix        string
			cfg           Config
			direct, moved bool
		}{
			{"", testConfig(b), false, false},
			{"-reexec", testConfig(b).WithStageBinary(self), false, false},
			{"-direct", testConfig(b), true, false},
			{"-moved", testConfig(b), false, true},
		} {
			if v.direct && tc.name != NameContainer {
				continue // only containers start through the spawner
			}
			if v.suffix != "" && !slices.Contains(variants, v.suffix) {
				continue
			}
			tier := newTestTier(b, tc, v.cfg, withDirectStarts(v.direct), withParentMoves(v.moved))
			tiers = append(tiers, tier)
			names = append(names, tc.name+v.suffix)
			runs[tc.name+v.suffix] = func() error { _, err := tier.Run(context.Background(), job); return err }
		}
	}
	times := map[string][]time.Duration{}
	// Each round runs the variants in a new random order, and each start
	// waits, untimed, for the others' clean-up (below): a start's
	// background clean-up (a sandbox's destroy, the kernel's teardown of
	// its namespaces) would otherwise fall on whichever runs next.
	rng := rand.New(rand.NewPCG(1, 2))
	i := 0
	for b.Loop() {
		order := slices.Clone(names)
		rng.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
		for _, name := range order {
			// Untimed: every sandbox's background clean-up is done and the
			// kernel's teardown of the last start's namespaces has had time,
			// so that no variant pays for another's (five of the six are
			// this package's, whose clean-up would otherwise fall mostly on
			// the others, bwrap included).
			b.StopTimer()
			for _, t := range tiers {
				t.cleanups.Wait()
			}
			time.Sleep(idle)
			b.StartTimer()
			start := time.Now()
			if err := runs[name](); err != nil {
				b.Fatalf("%s: %v", name, err)
			}
			times[name] = append(times[name], time.Since(start))
		}
		i++
	}
	m := medians{}
	for name, ts := range times {
		m[name] = median(ts)
	}
	b.Logf("stage binary: %s; %d rounds, each start after %v idle", sb.path, i, idle)
	m.ratios(b, "bwrap", "process-reexec", "seccomp-reexec", "process-moved", "seccomp-moved")
	if m["bwrap"] > 0 {
		b.ReportMetric(float64(m["process"])/float64(m["bwrap"]), "process/bwrap")
		b.ReportMetric(float64(m["seccomp"])/float64(m["bwrap"]), "seccomp/bwrap")
	}
}

// BenchmarkFirstContainer splits a fresh container tier's first start
// (the `airlock bench` cold row) into what it does once and what every
// start does, interleaved and in a new random order each round, each start
// after every clean-up and 5 ms of idle: bwrap; a new tier's first
// container; a new tier's first after its spawner was started (untimed);
// after its spawner and one container (whose spare cgroup, spare network
// namespace and /etc template the next start finds ready); and the next
// container of a live tier. Each round's new tiers are built and closed
// untimed.
func BenchmarkFirstContainer(b *testing.B) {
	bwrap, err := tools.Find("bwrap")
	if err != nil {
		testenv.Skipf(b, "bwrap (Debian bubblewrap; scripts/setup.sh installs it) is missing: %v", err)
	}
	job := cmdJob("/bin/true")
	live := newTestTier(b, bothTiers[0], testConfig(b))
	if _, err := live.Run(context.Background(), job); err != nil {
		b.Fatal(err)
	}
	fresh := func(prepare func(*Tier) error) func() (func() error, func()) {
		return func() (func() error, func()) {
			t, err := New(testConfig(b))
			if err != nil {
				b.Fatal(err)
			}
			if prepare != nil {
				if err := prepare(t); err != nil {
					b.Fatal(err)
				}
				t.cleanups.Wait()
			}
			return func() error { _, err := t.Run(context.Background(), job); return err },
				func() {
					if err := t.Close(); err != nil {
						b.Error(err)
					}
				}
		}
	}
	withSpawner := func(t *Tier) error {
		bin, err := t.stageBin()
		if err == nil {
			_, err = t.spawn.get(bin)
		}
		return err
	}
	variants := map[string]func() (func() error, func()){
		"bwrap": func() (func() error, func()) {
			return func() error { return exec.Command(bwrap, bwrapArgs...).Run() }, func() {}
		},
		"first":         fresh(nil),
		"spawner-ready": fresh(withSpawner),
		"second": fresh(func(t *Tier) error {
			if err := withSpawner(t); err != nil {
				return err
			}
			_, err := t.Run(context.Background(), job)
			return err
		}),
		"live": func() (func() error, func()) {
			return func() error { _, err := live.Run(context.Background(), job); return err }, func() {}
		},
	}
	names := []string{"bwrap", "first", "spawner-ready", "second", "live"}
	times := map[string][]time.Duration{}
	rng := rand.New(rand.NewPCG(3, 4))
	for b.Loop() {
		order := slices.Clone(names)
		rng.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
		for _, name := range order {
			b.StopTimer()
			run, done := variants[name]()
			live.cleanups.Wait()
			time.Sleep(5 * time.Millisecond)
			b.StartTimer()
			start := time.Now()
			err := run()
			times[name] = append(times[name], time.Since(start))
			b.StopTimer()
			done()
			b.StartTimer()
			if err != nil {
				b.Fatalf("%s: %v", name, err)
			}
		}
	}
	m := medians{}
	for name, ts := range times {
		m[name] = median(ts)
	}
	m.ratios(b, "bwrap", "live")
	if m["bwrap"] > 0 {
		b.ReportMetric(float64(m["first"])/float64(m["bwrap"]), "first/bwrap")
		b.ReportMetric(float64(m["live"])/float64(m["bwrap"]), "live/bwrap")
	}
}

// BenchmarkColdStartLargeCaller starts a cold container from a process
// holding a 1 GiB heap (as a long-running server may), through the
// tier's spawner and directly from this process, interleaved. A stage in
// a new user namespace is started with a full fork, whose cost grows with
// the forking process's memory: the spawner is a small process.
func BenchmarkColdStartLargeCaller(b *testing.B) {
	ballast := make([][]byte, 0, 1024)
	for range 1024 {
		page := make([]byte, 1<<20)
		for i := 0; i < len(page); i += 4096 {
			page[i] = 1
		}
		ballast = append(ballast, page)
	}
	defer runtime.KeepAlive(ballast)
	job := cmdJob("/bin/true")
	viaSpawner := newTestTier(b, bothTiers[0], testConfig(b))
	direct := newTestTier(b, bothTiers[0], testConfig(b), withDirectStarts(true))
	var ts, td []time.Duration
	for b.Loop() {
		for _, v := range []struct {
			tier  *Tier
			times *[]time.Duration
		}{{viaSpawner, &ts}, {direct, &td}} {
			start := time.Now()
			if _, err := v.tier.Run(context.Background(), job); err != nil {
				b.Fatal(err)
			}
			*v.times = append(*v.times, time.Since(start))
		}
	}
	ms, md := median(ts), median(td)
	b.Logf("1 GiB heap in the caller: spawner %.3f ms, direct fork %.3f ms (%.2f×)", float64(ms.Microseconds())/1000, float64(md.Microseconds())/1000, float64(md)/float64(ms))
	b.ReportMetric(float64(ms.Microseconds())/1000, "spawner-ms")
	b.ReportMetric(float64(md.Microseconds())/1000, "direct-ms")
}

// BenchmarkColdStart starts /bin/true: bare fork/exec, bwrap with every
// namespace, and the two tiers cold; the container also from a warm pool
// (full and idle before each timed claim).
func BenchmarkColdStart(b *testing.B) {
	m := medians{}
	b.Run("exec", func(b *testing.B) {
		m["exec"] = medianReport(b, timed(func() error { return exec.Command("/bin/true").Run() }))
	})
	b.Run("bwrap", func(b *testing.B) {
		bwrap, err := tools.Find("bwrap")
		if err != nil {
			testenv.Skipf(b, "bwrap (Debian bubblewrap; scripts/setup.sh installs it) is missing: %v", err)
		}
		m["bwrap"] = medianReport(b, timed(func() error { return exec.Command(bwrap, bwrapArgs...).Run() }))
	})
	job := cmdJob("/bin/true")
	if sb, err := discoverStage(); err == nil {
		if sb.separate() {
			b.Logf("stage binary: %s", sb.path)
		} else {
			b.Logf("stage binary: this test binary re-executed (%s)", sb.why)
		}
	}
	for _, tc := range bothTiers {
		b.Run(tc.name, func(b *testing.B) {
			tier := newTestTier(b, tc, testConfig(b))
			m[tc.name] = medianReport(b, warm(b, tier, func() error { _, err := tier.Run(context.Background(), job); return err }))
		})
	}
	b.Run("process-pooled", func(b *testing.B) {
		tier := newTestTier(b, bothTiers[0], testConfig(b).WithPool(2))
		var claims []time.Duration
		m["process-pooled"] = medianReport(b, warm(b, tier, func() error {
			res, err := tier.Run(context.Background(), job)
			claims = append(claims, time.Duration(res.Timings.StartUS)*time.Microsecond)
			return err
		}))
		m["pooled-claim"] = median(claims)
		b.ReportMetric(float64(m["pooled-claim"].Microseconds()), "claim-median-µs")
	})
	m.ratios(b, "exec", "bwrap")
}

// BenchmarkGuardedExpr compares an expression in-process with the same
// expression in a warm guarded worker (the pool full and idle before each
// timed run).
func BenchmarkGuardedExpr(b *testing.B) {
	m := medians{}
	job := airlock.Job{Kind: airlock.KindExpr, Code: "x * 2 + 1", Input: map[string]any{"x": int64(20)}}
	b.Run("raw", func(b *testing.B) {
		tier := expr.New()
		m["expr"] = medianReport(b, timed(func() error { _, err := tier.Run(context.Background(), job); return err }))
	})
	b.Run("guarded", func(b *testing.B) {
		g, err := NewGuarded("expr", testConfig(b).WithPool(4))
		if err != nil {
			b.Fatal(err)
		}
		defer g.Close()
		if err := g.Available(); err != nil {
			tiertest.Unavailable(b, g.Name(), err)
		}
		m["guarded-expr"] = medianReport(b, warm(b, g, func() error { _, err := g.Run(context.Background(), job); return err }))
	})
	m.ratios(b, "expr")
}

// pipeEchoRole makes the test binary a pipe echo: it answers each byte on
// stdin with one on stdout, for the round-trip floor in
// BenchmarkGuardedRoundTrip.
const pipeEchoRole = "test-pipe-echo"

func pipeEcho() int {
	var b [1]byte
	for {
		if n, err := os.Stdin.Read(b[:]); n != 1 || err != nil {
			return 0
		}
		if _, err := os.Stdout.Write(b[:]); err != nil {
			return 0
		}
	}
}

// BenchmarkGuardedRoundTrip isolates a warm guarded job from claim to
// result and pairs it, iteration by iteration and in alternating order,
// with the floor it cannot beat on this machine: a one-byte pipe round
// trip to an idle process (this binary as an echo, with GOMAXPROCS=1 like
// a worker). Both sides start idle: the pool is full and nothing is being
// destroyed (waited for untimed), then a short pause lets the CPUs idle,
// as they do between sporadic jobs. It reports both medians, their ratio,
// and the median of the job's Timings.StartUS (the host's claim up to the
// request, plus the worker's compile).
func BenchmarkGuardedRoundTrip(b *testing.B) {
	g, err := NewGuarded("expr", testConfig(b).WithPool(2))
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	if err := g.Available(); err != nil {
		tiertest.Unavailable(b, g.Name(), err)
	}
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	echo := exec.Command(exe)
	echo.Env = []string{role.Env + "=" + pipeEchoRole, "GOMAXPROCS=1"}
	in, err := echo.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := echo.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := echo.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { in.Close(); _ = echo.Wait() }()
	ping := func() (time.Duration, error) {
		var buf [1]byte
		start := time.Now()
		if _, err := in.Write(buf[:]); err != nil {
			return 0, err
		}
		_, err := io.ReadFull(out, buf[:])
		return time.Since(start), err
	}
	if _, err := ping(); err != nil { // the echo's own start-up
		b.Fatal(err)
	}
	job := airlock.Job{Kind: airlock.KindExpr, Code: "x * 2 + 1", Input: map[string]any{"x": int64(20)}}
	guarded := func() (time.Duration, time.Duration, error) {
		start := time.Now()
		res, err := g.Run(context.Background(), job)
		d := time.Since(start)
		if err == nil && res.Value != int64(41) {
			err = fmt.Errorf("value %v, want 41", res.Value)
		}
		return d, time.Duration(res.Timings.StartUS) * time.Microsecond, err
	}
	var pipes, jobs, starts []time.Duration
	i := 0
	for b.Loop() {
		b.StopTimer()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := g.WaitWarm(ctx)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond)
		b.StartTimer()
		for k := range 2 {
			if (i+k)%2 == 0 {
				d, err := ping()
				if err != nil {
					b.Fatal(err)
				}
				pipes = append(pipes, d)
			} else {
				d, start, err := guarded()
				if err != nil {
					b.Fatal(err)
				}
				jobs, starts = append(jobs, d), append(starts, start)
			}
			time.Sleep(time.Millisecond) // idle again before the other side
		}
		i++
	}
	pm, jm, sm := median(pipes), median(jobs), median(starts)
	b.ReportMetric(float64(pm.Nanoseconds())/1000, "pipe-median-µs")
	b.ReportMetric(float64(jm.Nanoseconds())/1000, "guarded-median-µs")
	b.ReportMetric(float64(sm.Nanoseconds())/1000, "start-median-µs")
	if pm > 0 {
		b.ReportMetric(float64(jm)/float64(pm), "guarded/pipe")
	}
}

// BenchmarkEgress measures what the egress wiring costs a job: /bin/true
// without and with a net grant (gateway, CA, forwarder), and one curl GET
// through the forwarder and gateway to a loopback origin against the same
// curl run on the host straight to the origin.
func BenchmarkEgress(b *testing.B) {
	if _, err := exec.LookPath("curl"); err != nil {
		testenv.Skipf(b, "curl (scripts/setup-egress.sh installs it) is missing: %v", err)
	}
	o := egresstest.StartOrigin(b, "origin.test")
	cfg := NewConfig().WithBaseDir(b.TempDir()).WithEgress(egress.Config{Hosts: o.Pins})
	tier, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := tier.Available(); err != nil {
		tiertest.Unavailable(b, tier.Name(), err)
	}
	defer tier.Close()
	run := func(job airlock.Job) func() error {
		return func() error {
			res, err := tier.Run(context.Background(), job)
			if err == nil && res.ExitCode != 0 {
				err = fmt.Errorf("exit %d: %s", res.ExitCode, res.Stderr)
			}
			return err
		}
	}
	rule := o.Rule("origin.test")
	b.Run("true", func(b *testing.B) { medianReport(b, timed(run(cmdJob("/bin/true")))) })
	granted := cmdJob("/bin/true")
	granted.Grants.Net = []airlock.NetRule{rule}
	b.Run("true-net", func(b *testing.B) { medianReport(b, timed(run(granted))) })
	b.Run("curl-host", func(b *testing.B) {
		medianReport(b, timed(func() error {
			return exec.Command("curl", "-sf", "-o", "/dev/null", "http://127.0.0.1:"+o.Port+"/").Run()
		}))
	})
	b.Run("curl-sandbox", func(b *testing.B) {
		medianReport(b, timed(run(egresstest.ShellJob("curl -sf -o /dev/null http://origin.test:"+o.Port+"/", rule))))
	})
}

// BenchmarkColdStartImage starts /bin/true cold in the host view and in
// a busybox image (imagetest.Busybox), interleaved in a new random order
// each round, each start after every clean-up and 5 ms of idle, and
// reports the ratio of the medians (image/host). The image's root costs
// the start an open_tree of it in the parent and an overlay mount in the
// stage, against the host view's binds of /usr and the /etc template; the
// programs differ too (busybox is static, the host's true is not).
func BenchmarkColdStartImage(b *testing.B) {
	r := imagetest.New(b)
	r.Add("busybox", busyboxImage(b, "bench"), image.Config{})
	host := newTestTier(b, bothTiers[0], testConfig(b))
	img := newTestTier(b, bothTiers[0], testConfig(b).WithImages(r))
	job := cmdJob("/bin/true")
	tiers := map[string]*Tier{"host": host, "image": img}
	for name, tier := range tiers { // untimed: each tier's first start (spawner, templates)
		if _, err := tier.Run(context.Background(), job); err != nil {
			b.Fatalf("%s: %v", name, err)
		}
	}
	names := []string{"host", "image"}
	times := map[string][]time.Duration{}
	rng := rand.New(rand.NewPCG(5, 6))
	for b.Loop() {
		order := slices.Clone(names)
		rng.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
		for _, name := range order {
			b.StopTimer()
			host.cleanups.Wait()
			img.cleanups.Wait()
			time.Sleep(5 * time.Millisecond)
			b.StartTimer()
			start := time.Now()
			res, err := tiers[name].Run(context.Background(), job)
			times[name] = append(times[name], time.Since(start))
			if err == nil && res.ExitCode != 0 {
				err = fmt.Errorf("exit %d: %s", res.ExitCode, res.Stderr)
			}
			if err != nil {
				b.Fatalf("%s: %v", name, err)
			}
		}
	}
	m := medians{"host": median(times["host"]), "image": median(times["image"])}
	if sb, err := discoverStage(); err == nil && sb.separate() {
		b.Logf("stage binary: %s", sb.path)
	} else if err == nil {
		b.Logf("stage binary: this test binary re-executed (%s)", sb.why)
	}
	m.ratios(b, "host")
	if m["host"] > 0 {
		b.ReportMetric(float64(m["image"])/float64(m["host"]), "image/host")
	}
}
