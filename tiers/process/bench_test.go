package process

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/internal/egresstest"
	"github.com/airlock-sandbox/airlock/internal/tools"
	"github.com/airlock-sandbox/airlock/interp/expr"
)

// medianReport runs fn per iteration and reports the median of the
// durations it returns (the docs quote medians as ratios against the raw
// peer of the same run).
func medianReport(b *testing.B, fn func() (time.Duration, error)) {
	b.Helper()
	times := make([]time.Duration, 0, b.N)
	for b.Loop() {
		d, err := fn()
		if err != nil {
			b.Fatal(err)
		}
		times = append(times, d)
	}
	slices.Sort(times)
	if len(times) > 0 {
		b.ReportMetric(float64(times[len(times)/2].Nanoseconds())/1000, "median-µs")
	}
}

// timed times fn.
func timed(fn func() error) func() (time.Duration, error) {
	return func() (time.Duration, error) {
		start := time.Now()
		err := fn()
		return time.Since(start), err
	}
}

// BenchmarkColdStart starts /bin/true: bare fork/exec, bwrap with every
// namespace, and the two tiers (the container also from a warm pool).
func BenchmarkColdStart(b *testing.B) {
	b.Run("exec", func(b *testing.B) {
		medianReport(b, timed(func() error { return exec.Command("/bin/true").Run() }))
	})
	b.Run("bwrap", func(b *testing.B) {
		bwrap, err := tools.Find("bwrap")
		if err != nil {
			b.Skip(err)
		}
		args := []string{"--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr",
			"--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
			"--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "/bin/true"}
		medianReport(b, timed(func() error { return exec.Command(bwrap, args...).Run() }))
	})
	job := cmdJob("/bin/true")
	for _, tc := range bothTiers {
		b.Run(tc.name, func(b *testing.B) {
			tier := newTestTier(b, tc, testConfig(b))
			medianReport(b, timed(func() error { _, err := tier.Run(context.Background(), job); return err }))
		})
	}
	b.Run("process-pooled", func(b *testing.B) {
		tier := newTestTier(b, bothTiers[0], testConfig(b).WithPool(2))
		var claims []time.Duration
		medianReport(b, warm(b, tier.pool.len, func() error {
			res, err := tier.Run(context.Background(), job)
			claims = append(claims, time.Duration(res.Timings.StartUS)*time.Microsecond)
			return err
		}))
		slices.Sort(claims)
		b.ReportMetric(float64(claims[len(claims)/2].Microseconds()), "claim-median-µs")
	})
}

// warm times fn once the pool has an instance ready (waiting untimed).
func warm(b *testing.B, ready func() int, fn func() error) func() (time.Duration, error) {
	return func() (time.Duration, error) {
		b.StopTimer()
		waitReady(b, ready)
		b.StartTimer()
		return timed(fn)()
	}
}

func waitReady(b *testing.B, n func() int) {
	deadline := time.Now().Add(time.Minute)
	for n() == 0 {
		if time.Now().After(deadline) {
			b.Fatal("pool did not refill")
		}
		time.Sleep(time.Millisecond)
	}
}

// BenchmarkGuardedExpr compares an expression in-process with the same
// expression in a warm guarded worker.
func BenchmarkGuardedExpr(b *testing.B) {
	job := airlock.Job{Kind: airlock.KindExpr, Code: "x * 2 + 1", Input: map[string]any{"x": int64(20)}}
	b.Run("raw", func(b *testing.B) {
		tier := expr.New()
		medianReport(b, timed(func() error { _, err := tier.Run(context.Background(), job); return err }))
	})
	b.Run("guarded", func(b *testing.B) {
		g, err := NewGuarded("expr", testConfig(b).WithPool(4))
		if err != nil {
			b.Fatal(err)
		}
		defer g.Close()
		if err := g.Available(); err != nil {
			b.Skip(err)
		}
		medianReport(b, warm(b, g.pool.len, func() error { _, err := g.Run(context.Background(), job); return err }))
	})
}

// BenchmarkEgress measures what the egress wiring costs a job: /bin/true
// without and with a net grant (gateway, CA, forwarder), and one curl GET
// through the forwarder and gateway to a loopback origin against the same
// curl run on the host straight to the origin.
func BenchmarkEgress(b *testing.B) {
	if _, err := exec.LookPath("curl"); err != nil {
		b.Skip(err)
	}
	o := egresstest.StartOrigin(b, "origin.test")
	cfg := NewConfig().WithBaseDir(b.TempDir()).WithEgress(egress.Config{Hosts: o.Pins})
	tier, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := tier.Available(); err != nil {
		b.Skip(err)
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
