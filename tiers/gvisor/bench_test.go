package gvisor

import (
	"context"

	"os/exec"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
)

// medians records per-iteration times and reports their median, which is
// what docs/gvisor.md quotes (means are skewed by a busy shared machine).
type medians []time.Duration

func (m *medians) time(fn func()) {
	start := time.Now()
	fn()
	*m = append(*m, time.Since(start))
}

func (m medians) report(b *testing.B) {
	if len(m) == 0 {
		return
	}
	sort.Slice(m, func(i, j int) bool { return m[i] < m[j] })
	b.ReportMetric(float64(m[len(m)/2].Microseconds())/1000, "median-ms")
}

// BenchmarkCold compares a cold job through the tier with a raw `runsc run`
// of the same bundle (same flags, same spec), both running /bin/true.
func BenchmarkCold(b *testing.B) {
	tier := newTier(b, NewConfig())
	job, err := airlock.Prepare(cmdJob("/bin/true"), tier.cfg.limits)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("raw", func(b *testing.B) {
		dir := b.TempDir()
		id := tier.newID()
		bd := tier.newBundle(id, &job)
		bd.args, bd.env, bd.scratch = job.Argv, jobEnv(nil), filepath.Join(dir, "scratch")
		if err := writeFiles(bd.scratch, nil, sandboxUID); err != nil {
			b.Fatal(err)
		}
		if err := bd.write(dir); err != nil {
			b.Fatal(err)
		}
		var m medians
		for b.Loop() {
			m.time(func() {
				cmd := exec.Command(tier.runsc, append(tier.runscFlags(false), "run", "--bundle", dir, id)...)
				if out, err := cmd.CombinedOutput(); err != nil {
					b.Fatalf("runsc run: %v: %s", err, out)
				}
			})
		}
		m.report(b)
		_ = (cgroup{path: "/" + id}).remove()
	})
	b.Run("tier", func(b *testing.B) {
		var m medians
		for b.Loop() {
			m.time(func() {
				if _, err := tier.Run(context.Background(), job); err != nil {
					b.Fatal(err)
				}
			})
		}
		m.report(b)
	})
}

// BenchmarkPooled measures claim-to-result for /bin/true through the warm
// pool: the pool is refilled (and the previous sandbox destroyed) outside
// the timed region, so each iteration is one claim of a ready sandbox.
func BenchmarkPooled(b *testing.B) {
	tier := newTier(b, NewConfig().WithPool(1, 1))
	job := cmdJob("/bin/true")
	var m medians
	for b.Loop() {
		b.StopTimer()
		waitReady(b, tier, 1)
		tier.bg.Wait()
		b.StartTimer()
		m.time(func() {
			if _, err := tier.Run(context.Background(), job); err != nil {
				b.Fatal(err)
			}
		})
	}
	m.report(b)
	if st := tier.Stats(); st.Misses > 0 {
		b.Fatalf("some runs missed the pool: %+v", st)
	}
}
