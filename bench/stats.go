package bench

import (
	"math"
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// Stats summarise the samples of one measurement. Times are microseconds
// (fractions kept: an expression runs in well under one).
type Stats struct {
	N    int     `json:"n"`
	P50  float64 `json:"p50_us"`
	P95  float64 `json:"p95_us"`
	P99  float64 `json:"p99_us"`
	Min  float64 `json:"min_us"`
	Max  float64 `json:"max_us"`
	Mean float64 `json:"mean_us"`
	// CPU is the CPU time (user + system, of this process and of the
	// children it waited for) per run, from getrusage deltas around each run.
	CPU float64 `json:"cpu_us_per_run"`
	// Batch, when above 1, is how many warm runs each sample timed
	// together: runs shorter than a few clock reads are timed in batches,
	// each sample its batch's mean, so percentiles describe batch means.
	Batch int `json:"batch,omitempty"`
}

// summarise computes Stats from wall-clock samples and the total CPU time.
func summarise(samples []time.Duration, cpu time.Duration) Stats {
	if len(samples) == 0 {
		return Stats{}
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	us := func(d time.Duration) float64 { return round3(float64(d) / 1e3) }
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	return Stats{
		N:    len(s),
		P50:  us(percentile(s, 50)),
		P95:  us(percentile(s, 95)),
		P99:  us(percentile(s, 99)),
		Min:  us(s[0]),
		Max:  us(s[len(s)-1]),
		Mean: us(sum / time.Duration(len(s))),
		CPU:  us(cpu / time.Duration(len(s))),
	}
}

// percentile returns the nearest-rank percentile of sorted samples.
func percentile(sorted []time.Duration, p float64) time.Duration {
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

func round3(f float64) float64 { return math.Round(f*1000) / 1000 }

// cpuTime returns the CPU time used so far by this process and by the
// children it has waited for.
func cpuTime() time.Duration {
	var self, kids unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &self)
	_ = unix.Getrusage(unix.RUSAGE_CHILDREN, &kids)
	tv := func(t unix.Timeval) time.Duration { return time.Duration(t.Nano()) }
	return tv(self.Utime) + tv(self.Stime) + tv(kids.Utime) + tv(kids.Stime)
}

// ratio returns a/b rounded, or 0 when b is 0.
func ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return math.Round(a/b*100) / 100
}
