package server

import (
	"github.com/airlock-sandbox/airlock"

	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// buckets are the latency histogram's upper bounds in seconds: from a
// cached expression (microseconds) to a cold microVM (seconds).
var buckets = []float64{0.00001, 0.00005, 0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30}

type histogram struct {
	counts [14]atomic.Int64 // len(buckets)+1: the last is +Inf
	sumNS  atomic.Int64
}

func (h *histogram) observe(d time.Duration) {
	s := d.Seconds()
	i := sort.SearchFloat64s(buckets, s)
	h.counts[i].Add(1)
	h.sumNS.Add(int64(d))
}

// metrics are written in the Prometheus text exposition format (0.0.4).
// Label values come from tier names, outcomes and capability names, which
// are escaped anyway.
type metrics struct {
	runs     sync.Map // "tier\x00outcome" -> *atomic.Int64
	latency  sync.Map // tier -> *histogram
	startup  sync.Map // tier -> *histogram: the tier's start-up time (Timings.StartUS)
	denials  sync.Map // capability -> *atomic.Int64
	refusals sync.Map // reason -> *atomic.Int64 (429, 400, ...)
	inFlight atomic.Int64
	sessions atomic.Int64
	started  time.Time
}

func counter(m *sync.Map, key string) *atomic.Int64 {
	if v, ok := m.Load(key); ok {
		return v.(*atomic.Int64)
	}
	v, _ := m.LoadOrStore(key, new(atomic.Int64))
	return v.(*atomic.Int64)
}

func (m *metrics) run(tier, outcome string, d, startup time.Duration) {
	if tier == "" {
		tier = "none"
	}
	counter(&m.runs, tier+"\x00"+outcome).Add(1)
	hist(&m.latency, tier).observe(d)
	if startup > 0 {
		hist(&m.startup, tier).observe(startup)
	}
}

func hist(m *sync.Map, key string) *histogram {
	v, ok := m.Load(key)
	if !ok {
		v, _ = m.LoadOrStore(key, new(histogram))
	}
	return v.(*histogram)
}

func escapeLabel(s string) string {
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`).Replace(s)
}

func sortedKeys(m *sync.Map) []string {
	var keys []string
	m.Range(func(k, _ any) bool { keys = append(keys, k.(string)); return true })
	sort.Strings(keys)
	return keys
}

func writeHistograms(w io.Writer, name, help string, m *sync.Map) {
	fmt.Fprintf(w, "# HELP %s %s\n", name, help)
	fmt.Fprintf(w, "# TYPE %s histogram\n", name)
	for _, tier := range sortedKeys(m) {
		v, _ := m.Load(tier)
		h := v.(*histogram)
		t := escapeLabel(tier)
		var cum int64
		for i, b := range buckets {
			cum += h.counts[i].Load()
			fmt.Fprintf(w, "%s_bucket{tier=\"%s\",le=\"%s\"} %d\n", name, t, strconv.FormatFloat(b, 'g', -1, 64), cum)
		}
		cum += h.counts[len(buckets)].Load()
		fmt.Fprintf(w, "%s_bucket{tier=\"%s\",le=\"+Inf\"} %d\n", name, t, cum)
		fmt.Fprintf(w, "%s_sum{tier=\"%s\"} %s\n", name, t, strconv.FormatFloat(float64(h.sumNS.Load())/1e9, 'g', -1, 64))
		fmt.Fprintf(w, "%s_count{tier=\"%s\"} %d\n", name, t, cum)
	}
}

// eachImage calls f with the tier and image labels and the counters of
// each image's pool, tiers and images in order.
func eachImage(names []string, stats []airlock.PoolStats, f func(labels string, st airlock.PoolStats)) {
	for i, n := range names {
		for _, img := range slices.Sorted(maps.Keys(stats[i].Images)) {
			f(fmt.Sprintf("tier=\"%s\",image=\"%s\"", escapeLabel(n), escapeLabel(img)), stats[i].Images[img])
		}
	}
}

func (m *metrics) write(w io.Writer, pools map[string]airlock.Pooler) {
	fmt.Fprintln(w, "# HELP airlock_runs_total Runs by tier and outcome (ok, exit_nonzero, stopped_REASON, error_KIND).")
	fmt.Fprintln(w, "# TYPE airlock_runs_total counter")
	for _, k := range sortedKeys(&m.runs) {
		tier, outcome, _ := strings.Cut(k, "\x00")
		v, _ := m.runs.Load(k)
		fmt.Fprintf(w, "airlock_runs_total{tier=\"%s\",outcome=\"%s\"} %d\n", escapeLabel(tier), escapeLabel(outcome), v.(*atomic.Int64).Load())
	}
	writeHistograms(w, "airlock_run_duration_seconds", "Time from request to result, per tier.", &m.latency)
	writeHistograms(w, "airlock_run_startup_seconds", "Time the tier took to start a run (Timings.start_us), per tier.", &m.startup)
	fmt.Fprintln(w, "# HELP airlock_denials_total Attempts to use a withheld capability, by capability.")
	fmt.Fprintln(w, "# TYPE airlock_denials_total counter")
	for _, k := range sortedKeys(&m.denials) {
		v, _ := m.denials.Load(k)
		fmt.Fprintf(w, "airlock_denials_total{capability=\"%s\"} %d\n", escapeLabel(k), v.(*atomic.Int64).Load())
	}
	fmt.Fprintln(w, "# HELP airlock_refused_total Requests refused before running, by reason.")
	fmt.Fprintln(w, "# TYPE airlock_refused_total counter")
	for _, k := range sortedKeys(&m.refusals) {
		v, _ := m.refusals.Load(k)
		fmt.Fprintf(w, "airlock_refused_total{reason=\"%s\"} %d\n", escapeLabel(k), v.(*atomic.Int64).Load())
	}
	fmt.Fprintln(w, "# HELP airlock_runs_in_flight Runs executing now.")
	fmt.Fprintln(w, "# TYPE airlock_runs_in_flight gauge")
	fmt.Fprintf(w, "airlock_runs_in_flight %d\n", m.inFlight.Load())
	fmt.Fprintln(w, "# HELP airlock_sessions_open Sessions open now.")
	fmt.Fprintln(w, "# TYPE airlock_sessions_open gauge")
	fmt.Fprintf(w, "airlock_sessions_open %d\n", m.sessions.Load())
	if len(pools) > 0 {
		names := make([]string, 0, len(pools))
		for n := range pools {
			names = append(names, n)
		}
		sort.Strings(names)
		stats := make([]airlock.PoolStats, len(names))
		for i, n := range names {
			stats[i] = pools[n].PoolStats()
		}
		fmt.Fprintln(w, "# HELP airlock_pool_size Warm instances ready, per tier.")
		fmt.Fprintln(w, "# TYPE airlock_pool_size gauge")
		for i, n := range names {
			fmt.Fprintf(w, "airlock_pool_size{tier=\"%s\"} %d\n", escapeLabel(n), stats[i].Ready)
		}
		fmt.Fprintln(w, "# HELP airlock_pool_capacity Warm instances configured, per tier.")
		fmt.Fprintln(w, "# TYPE airlock_pool_capacity gauge")
		for i, n := range names {
			fmt.Fprintf(w, "airlock_pool_capacity{tier=\"%s\"} %d\n", escapeLabel(n), stats[i].Size)
		}
		fmt.Fprintln(w, "# HELP airlock_pool_claims_total Pool claims by result (hit: a warm instance, miss: a cold start).")
		fmt.Fprintln(w, "# TYPE airlock_pool_claims_total counter")
		for i, n := range names {
			fmt.Fprintf(w, "airlock_pool_claims_total{tier=\"%s\",result=\"hit\"} %d\n", escapeLabel(n), stats[i].Hits)
			fmt.Fprintf(w, "airlock_pool_claims_total{tier=\"%s\",result=\"miss\"} %d\n", escapeLabel(n), stats[i].Misses)
		}
		fmt.Fprintln(w, "# HELP airlock_pool_start_failures_total Pool instances that failed to start, per tier (the reason: /v1/tiers pool_error).")
		fmt.Fprintln(w, "# TYPE airlock_pool_start_failures_total counter")
		for i, n := range names {
			fmt.Fprintf(w, "airlock_pool_start_failures_total{tier=\"%s\"} %d\n", escapeLabel(n), stats[i].Failed)
		}
		// Per image, in families of their own: summing a family must not
		// count the tier's totals twice.
		fmt.Fprintln(w, "# HELP airlock_pool_image_size Warm instances ready, per tier and image digest.")
		fmt.Fprintln(w, "# TYPE airlock_pool_image_size gauge")
		eachImage(names, stats, func(l string, st airlock.PoolStats) {
			fmt.Fprintf(w, "airlock_pool_image_size{%s} %d\n", l, st.Ready)
		})
		fmt.Fprintln(w, "# HELP airlock_pool_image_capacity Warm instances configured, per tier and image digest.")
		fmt.Fprintln(w, "# TYPE airlock_pool_image_capacity gauge")
		eachImage(names, stats, func(l string, st airlock.PoolStats) {
			fmt.Fprintf(w, "airlock_pool_image_capacity{%s} %d\n", l, st.Size)
		})
		fmt.Fprintln(w, "# HELP airlock_pool_image_name The names (catalogue names, references) each tier's pool of an image digest was configured by; 1 per name.")
		fmt.Fprintln(w, "# TYPE airlock_pool_image_name gauge")
		eachImage(names, stats, func(l string, st airlock.PoolStats) {
			for _, n := range st.Names {
				fmt.Fprintf(w, "airlock_pool_image_name{%s,name=\"%s\"} 1\n", l, escapeLabel(n))
			}
		})
		fmt.Fprintln(w, "# HELP airlock_pool_image_claims_total Pool claims per tier and image digest, by result.")
		fmt.Fprintln(w, "# TYPE airlock_pool_image_claims_total counter")
		eachImage(names, stats, func(l string, st airlock.PoolStats) {
			fmt.Fprintf(w, "airlock_pool_image_claims_total{%s,result=\"hit\"} %d\n", l, st.Hits)
			fmt.Fprintf(w, "airlock_pool_image_claims_total{%s,result=\"miss\"} %d\n", l, st.Misses)
		})
	}
	fmt.Fprintln(w, "# HELP airlock_uptime_seconds Seconds since the server started.")
	fmt.Fprintln(w, "# TYPE airlock_uptime_seconds gauge")
	fmt.Fprintf(w, "airlock_uptime_seconds %s\n", strconv.FormatFloat(math.Round(time.Since(m.started).Seconds()*1000)/1000, 'g', -1, 64))
}
