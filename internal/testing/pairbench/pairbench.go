// Package pairbench runs two implementations of one workload alternately
// in a single benchmark loop, so that both see the same machine load. On a
// shared machine the ratio of their means is far steadier than the ratio of
// two separate sub-benchmarks.
//
// Besides wall time it measures the benchmark thread's CPU time, where the
// platform has a per-thread CPU clock: on a machine with more runnable
// threads than cores, wall time mostly counts waiting for a core, while
// CPU time counts the work.
package pairbench

import (
	"runtime"
	"testing"
	"time"
)

// Run alternates raw and tier, each called n times in a row per
// iteration (n > 1 spreads the cost of reading the clocks over calls that
// take less than a clock read), and reports each side's mean per call as
// raw-ns/op and tier-ns/op and their ratio as tier/raw; and the same for
// thread CPU time as raw-cpu-ns/op, tier-cpu-ns/op and tier/raw-cpu.
func Run(b *testing.B, n int, raw, tier func() error) {
	n = max(n, 1)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var tr, tt, cr, ct time.Duration
	calls := 0
	for b.Loop() {
		c0, t0 := threadCPU(), time.Now()
		for range n {
			if err := raw(); err != nil {
				b.Fatal(err)
			}
		}
		c1, t1 := threadCPU(), time.Now()
		for range n {
			if err := tier(); err != nil {
				b.Fatal(err)
			}
		}
		c2, t2 := threadCPU(), time.Now()
		tr += t1.Sub(t0)
		tt += t2.Sub(t1)
		cr += c1 - c0
		ct += c2 - c1
		calls += n
	}
	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(calls) }
	b.ReportMetric(per(tr), "raw-ns/op")
	b.ReportMetric(per(tt), "tier-ns/op")
	b.ReportMetric(float64(tt)/float64(tr), "tier/raw")
	if cr > 0 {
		b.ReportMetric(per(cr), "raw-cpu-ns/op")
		b.ReportMetric(per(ct), "tier-cpu-ns/op")
		b.ReportMetric(float64(ct)/float64(cr), "tier/raw-cpu")
	}
}
