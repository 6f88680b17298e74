// Package pairbench runs two implementations of one workload alternately
// in a single benchmark loop, so that both see the same machine load. On a
// shared machine the ratio of their means is far steadier than the ratio of
// two separate sub-benchmarks.
package pairbench

import (
	"testing"
	"time"
)

// Run alternates raw and tier, each called n times in a row per
// iteration (n > 1 spreads the cost of reading the clock over calls that
// take less than a clock read), and reports each side's mean per call as
// raw-ns/op and tier-ns/op, and their ratio as tier/raw.
func Run(b *testing.B, n int, raw, tier func() error) {
	n = max(n, 1)
	var tr, tt time.Duration
	calls := 0
	for b.Loop() {
		t0 := time.Now()
		for range n {
			if err := raw(); err != nil {
				b.Fatal(err)
			}
		}
		t1 := time.Now()
		for range n {
			if err := tier(); err != nil {
				b.Fatal(err)
			}
		}
		t2 := time.Now()
		tr += t1.Sub(t0)
		tt += t2.Sub(t1)
		calls += n
	}
	b.ReportMetric(float64(tr.Nanoseconds())/float64(calls), "raw-ns/op")
	b.ReportMetric(float64(tt.Nanoseconds())/float64(calls), "tier-ns/op")
	b.ReportMetric(float64(tt)/float64(tr), "tier/raw")
}
