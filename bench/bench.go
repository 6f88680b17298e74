// Package bench measures the start-up latency of every airlock tier on the
// same trivial workload, cold and warm, side by side with the raw engines
// and peers underneath in the same run, so that every figure is also a
// ratio that survives a noisy machine. It also measures what the router
// picks per situation (what `tier: auto` costs) and the router's own
// overhead. `airlock bench` is its command line.
package bench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/escalate"
	"github.com/airlock-sandbox/airlock/internal/jobs"
	"github.com/airlock-sandbox/airlock/internal/monotime"
)

// Schema names the report's JSON format; it changes only with a new suffix.
const Schema = "airlock-bench/v1"

// Config configures a benchmark run. It is immutable: With methods return
// copies. The zero value is not useful; start from NewConfig.
type Config struct {
	iterations int
	minIter    int
	budget     time.Duration
	timeout    time.Duration
	tiers      []string
	progress   func(Progress)
	sources    []TierSource
	notes      []string
}

// NewConfig returns the defaults: at most 10000 runs and about two seconds
// per measurement (at least 5 runs), 60 s for one run, no tier (see
// [Config.WithSources]), every baseline.
func NewConfig() Config {
	return Config{iterations: 10000, minIter: 5, budget: 2 * time.Second, timeout: 60 * time.Second}
}

// WithIterations caps the runs per measurement (and lowers the minimum to
// it when it is smaller).
func (c Config) WithIterations(n int) Config { c.iterations = n; return c }

// WithBudget sets the time one measurement may take; it stops early after
// the cap on iterations, and runs at least the minimum (5) regardless.
func (c Config) WithBudget(d time.Duration) Config { c.budget = d; return c }

// WithTimeout bounds a single run; a run that takes longer fails its target.
func (c Config) WithTimeout(d time.Duration) Config { c.timeout = d; return c }

// WithTiers restricts the run to the named tiers (and their raw engines and
// peers); none means every tier of the sources.
func (c Config) WithTiers(names ...string) Config { c.tiers = slices.Clone(names); return c }

// WithProgress sets a function called before and after each measurement.
func (c Config) WithProgress(f func(Progress)) Config { c.progress = f; return c }

// WithNotes adds notes to the report (where the run was made, what else
// the machine was doing).
func (c Config) WithNotes(notes ...string) Config {
	c.notes = append(slices.Clone(c.notes), notes...)
	return c
}

// TierSource is a tier to measure: its name, how to build a fresh
// instance (cold runs, the probe, the router) and, when its warm form
// differs (a pool, a snapshot), how to build that.
type TierSource struct {
	Name string
	New  func() (airlock.Tier, error)
	// Warm builds the instance the warm runs use; nil: the instance New
	// built first.
	Warm func() (airlock.Tier, error)
}

// WithSources sets the tiers to measure.
func (c Config) WithSources(s ...TierSource) Config { c.sources = slices.Clone(s); return c }

// Progress reports where a run is.
type Progress struct {
	Done, Total int
	Label       string
}

func (c Config) validate() error {
	switch {
	case c.iterations < 1:
		return jobs.Invalid("iterations", "must be at least 1, not %d", c.iterations)
	case c.budget <= 0:
		return jobs.Invalid("budget", "must be positive")
	case c.timeout <= 0:
		return jobs.Invalid("timeout", "must be positive")
	}
	return nil
}

// Report is the result of a run; its JSON form is the stable schema Schema.
type Report struct {
	Schema   string      `json:"schema"`
	Started  time.Time   `json:"started"`
	Seconds  float64     `json:"seconds"`
	Machine  Machine     `json:"machine"`
	Settings Settings    `json:"settings"`
	Results  []Result    `json:"results"`
	Skipped  []Skipped   `json:"skipped,omitempty"`
	Routes   []Route     `json:"routes,omitempty"`
	Router   *RouterCost `json:"router,omitempty"`
	Notes    []string    `json:"notes,omitempty"`
}

// Settings records how the run was configured.
type Settings struct {
	Iterations int      `json:"iterations"`
	BudgetMS   int64    `json:"budget_ms"`
	TimeoutMS  int64    `json:"timeout_ms"`
	Tiers      []string `json:"tiers,omitempty"`
}

// Result is one measurement: a target in one mode.
type Result struct {
	Name     string       `json:"name"`
	Type     string       `json:"type"`
	Workload airlock.Kind `json:"workload"`
	Level    int          `json:"level,omitempty"`
	Mode     string       `json:"mode"` // cold or warm
	Note     string       `json:"note,omitempty"`
	// Accel is the hardware acceleration the runs used ("kvm" or "tcg"),
	// for targets that run a guest.
	Accel string `json:"accel,omitempty"`
	Stats
	// Raw is the raw engine this tier is compared with, and RawRatio its
	// median over the raw engine's median in the same mode (cold if the raw
	// engine has no warm path).
	Raw      string  `json:"raw,omitempty"`
	RawRatio float64 `json:"raw_ratio,omitempty"`
	// Paired: RawRatio is to Raw's runs alternating with these (a
	// whole-process row and its reference), not to Raw's own row.
	Paired bool `json:"paired,omitempty"`
	// Peers are the other engines' medians over this one's: how many times
	// slower each peer is (below 1: faster).
	Peers []PeerRatio `json:"peers,omitempty"`
	Error string      `json:"error,omitempty"`
}

// Label is the result's name as tables and charts show it, with the
// acceleration its runs used where there is one: "microvm (tcg)".
func (x Result) Label() string {
	if x.Accel == "" {
		return x.Name
	}
	return x.Name + " (" + x.Accel + ")"
}

// PeerRatio compares a tier with a raw engine or peer other than its own.
type PeerRatio struct {
	Name  string  `json:"name"`
	Ratio float64 `json:"ratio"` // this result's median over the peer's
}

// Skipped is a target that could not run here.
type Skipped struct {
	Name   string `json:"name"`
	Type   string `json:"type"`
	Reason string `json:"reason"`
}

// Route is what the router picks for one situation, and what a run
// through it costs (warm: the chosen tier's caches and pools are warm).
type Route struct {
	Situation string       `json:"situation"`
	Kind      airlock.Kind `json:"kind"`
	Tier      string       `json:"tier,omitempty"`
	Stats     *Stats       `json:"stats,omitempty"`
	Error     string       `json:"error,omitempty"`
}

// RouterCost is the router's own cost.
type RouterCost struct {
	// RouteNS is the time of one Route call (the decision alone).
	RouteNS float64 `json:"route_ns"`
	// RunOverheadUS is router.Run's median minus the chosen tier's own
	// warm median, for the expression workload (noisy: it can be negative).
	RunOverheadUS float64 `json:"run_overhead_us"`
}

// Run measures every selected, available target and returns the report.
// A target that fails is reported with its error; Run itself fails only on
// a bad configuration or a tier that cannot be built.
func Run(ctx context.Context, c Config) (*Report, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	rep := &Report{
		Schema: Schema, Started: time.Now().UTC(), Machine: machine(),
		Settings: Settings{Iterations: c.iterations, BudgetMS: c.budget.Milliseconds(), TimeoutMS: c.timeout.Milliseconds(), Tiers: c.tiers},
	}
	rep.Notes = slices.Clone(c.notes)
	if rep.Machine.Load1 > float64(rep.Machine.Cores) {
		rep.Notes = append(rep.Notes, fmt.Sprintf("the machine was busy (load %.1f on %d cores): absolute figures are noisy, ratios less so", rep.Machine.Load1, rep.Machine.Cores))
	}
	targets, shared, err := c.targets(rep)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, t := range shared {
			closeTier(t)
		}
	}()
	var live []Target
	for _, t := range targets {
		if err := t.Available(); err != nil {
			rep.Skipped = append(rep.Skipped, Skipped{Name: t.Name, Type: t.Type, Reason: err.Error()})
			continue
		}
		live = append(live, t)
	}
	// The in-process tiers' warm figures are a long-running host's: let
	// the cheap clock they read calibrate first (about half a second).
	monotime.WarmUp(2 * time.Second)
	total := 0
	for _, t := range live {
		total++
		if t.Warm != nil {
			total++
		}
	}
	routes := situations()
	total += len(routes) + 1
	done := 0
	step := func(label string) {
		if c.progress != nil {
			c.progress(Progress{Done: done, Total: total, Label: label})
		}
	}
	for _, t := range live {
		for _, mode := range []string{"cold", "warm"} {
			if mode == "warm" && t.Warm == nil {
				rep.Results = append(rep.Results, Result{Name: t.Name, Type: t.Type, Workload: t.Workload, Level: int(t.Level), Mode: "warm", Note: t.WarmNote, Error: "no warm path"})
				continue
			}
			step(t.Name + " " + mode)
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			rep.Results = append(rep.Results, c.measurePaired(ctx, t, pairedRef(t, live), mode))
			done++
		}
	}
	compareAll(rep.Results, live)
	if err := c.route(ctx, rep, shared, routes, step, &done); err != nil {
		return nil, err
	}
	step("done")
	rep.Seconds = round3(time.Since(rep.Started).Seconds())
	return rep, nil
}

// targets lists the tiers (built once each, and probed) and the baselines
// the configuration selects.
func (c Config) targets(rep *Report) ([]Target, []airlock.Tier, error) {
	want := map[string]bool{}
	for _, n := range c.tiers {
		want[n] = true
	}
	var (
		out    []Target
		shared []airlock.Tier
		kinds  = map[airlock.Kind]bool{}
		names  = map[string]bool{}
	)
	for _, f := range c.sources {
		names[f.Name] = true
		if len(want) > 0 && !want[f.Name] {
			continue
		}
		t, err := f.New()
		if err != nil {
			for _, s := range shared {
				closeTier(s)
			}
			return nil, nil, fmt.Errorf("building tier %s: %w", f.Name, err)
		}
		shared = append(shared, t)
		kind, err := kindOf(t)
		if err != nil {
			rep.Skipped = append(rep.Skipped, Skipped{Name: f.Name, Type: TypeTier, Reason: err.Error()})
			continue
		}
		kinds[kind] = true
		out = append(out, tierTarget(f, t, kind))
	}
	for n := range want {
		if !names[n] {
			for _, s := range shared {
				closeTier(s)
			}
			return nil, nil, jobs.Invalid("tiers", "unknown tier %q", n)
		}
	}
	for _, b := range Baselines() {
		// With no selection every baseline runs, so the raw figures are
		// there even for a tier this build does not register.
		if len(want) > 0 && !baselineWanted(b, out, kinds) {
			continue
		}
		out = append(out, b)
	}
	return out, shared, nil
}

// baselineWanted keeps a baseline that some selected tier is compared with.
func baselineWanted(b Target, tiers []Target, kinds map[airlock.Kind]bool) bool {
	if len(b.For) == 0 {
		return kinds[b.Workload]
	}
	for _, t := range tiers {
		if slices.Contains(b.For, t.Name) {
			return true
		}
	}
	return false
}

// measure runs one target in one mode: untimed preparation, timed runs
// until the budget or the iteration cap, at least the minimum.
func (c Config) measure(ctx context.Context, t Target, mode string) Result {
	return c.measurePaired(ctx, t, nil, mode)
}

// pairedRef is the target t's cold runs alternate with: its Versus (a
// whole-process row's reference), when that is measured here too.
func pairedRef(t Target, live []Target) *Target {
	if t.Versus == "" {
		return nil
	}
	for i := range live {
		if live[i].Name == t.Versus {
			return &live[i]
		}
	}
	return nil
}

// measurePaired is measure; with ref, each cold run of t follows one of
// ref, timed apart, and t's ratio is to ref's runs in the same stretch of
// time, so a machine that slows down or speeds up meanwhile moves both.
func (c Config) measurePaired(ctx context.Context, t Target, ref *Target, mode string) Result {
	res := Result{Name: t.Name, Type: t.Type, Workload: t.Workload, Level: int(t.Level), Mode: mode, Note: t.ColdNote}
	if t.Accel != nil {
		res.Accel = t.Accel()
	}
	// The previous measurement's garbage (a cold run's thousands of fresh
	// tier instances) is collected now, untimed, rather than by collector
	// cycles running beside this one's runs, as testing does before each
	// benchmark.
	runtime.GC()
	var (
		samples []time.Duration
		cpu     time.Duration
		start   = time.Now()
		minIter = min(c.minIter, c.iterations)
	)
	// perRunCPU reads getrusage around each run; warm runs are too short
	// for that (two system calls would outweigh them), so their CPU time is
	// taken over the whole batch.
	perRunCPU := mode == "cold"
	// Warm runs share one context (a timer per run would cost more than
	// the run); one that overruns the timeout is caught afterwards, and the
	// batch's deadline stops one that never returns.
	// A pooled target waits untimed between runs, so its runs get their
	// own deadlines instead.
	perRunCtx := perRunCPU || t.Settle != nil
	batch, cancelBatch := context.WithTimeout(ctx, c.budget+c.timeout)
	defer cancelBatch()
	settle := func() error {
		sctx, cancel := context.WithTimeout(ctx, c.timeout)
		defer cancel()
		return t.Settle(sctx)
	}
	one := func(run Trial) error {
		rctx, cancel := batch, context.CancelFunc(func() {})
		if perRunCtx {
			rctx, cancel = context.WithTimeout(ctx, c.timeout)
		}
		var c0, c1 time.Duration
		if perRunCPU {
			c0 = cpuTime()
		}
		t0 := time.Now()
		err := run(rctx)
		d := time.Since(t0)
		if perRunCPU {
			c1 = cpuTime()
		}
		if err == nil && (d > c.timeout || errors.Is(rctx.Err(), context.DeadlineExceeded)) {
			err = fmt.Errorf("run took longer than %v", c.timeout)
		}
		cancel()
		samples = append(samples, d)
		cpu += c1 - c0
		return err
	}
	more := func() bool {
		n := len(samples)
		return n < c.iterations && (n < minIter || time.Since(start) < c.budget) && ctx.Err() == nil
	}
	var err error
	if mode == "warm" {
		res.Note = t.WarmNote
		var run Trial
		var done func()
		if run, done, err = t.Warm(ctx); err == nil {
			// One untimed run fills the caches and pools.
			if t.Settle != nil {
				err = settle()
			}
			if err == nil {
				err = one(run)
			}
			if err == nil && t.Settle == nil {
				// A run much shorter than a clock read is timed in
				// batches (see batchSize), each sample its batch's mean.
				if k := batchSize(batch, run); k > 1 {
					samples, start = samples[:0], time.Now()
					c0 := cpuTime()
					err = c.timeBatches(batch, run, k, &samples, more)
					cpu = cpuTime() - c0
					done()
					if err != nil {
						res.Error = err.Error()
						return res
					}
					res.Stats = summarise(samples, cpu)
					res.Stats.Batch = k
					return res
				}
			}
			if err == nil {
				samples, start = samples[:0], time.Now()
				c0 := cpuTime()
				for more() {
					if t.Settle != nil {
						s0 := time.Now()
						if err = settle(); err != nil {
							err = fmt.Errorf("waiting for the pool to refill: %w", err)
							break
						}
						start = start.Add(time.Since(s0)) // the budget counts timed runs only
					}
					if err = one(run); err != nil {
						break
					}
				}
				cpu = cpuTime() - c0
			}
			done()
		}
	} else {
		var refSamples []time.Duration
		for i := 0; more(); i++ {
			if ref != nil {
				d, rerr := c.timeOnce(ctx, *ref, i)
				if rerr != nil {
					err = fmt.Errorf("%s, run beside it: %w", ref.Name, rerr)
					break
				}
				refSamples = append(refSamples, d)
			}
			run, done, perr := t.Cold(ctx, i)
			if perr != nil {
				err = perr
				break
			}
			err = one(run)
			done()
			if err != nil {
				break
			}
		}
		if err == nil && len(refSamples) > 0 {
			if m := summarise(refSamples, 0).P50; m > 0 {
				res.Raw, res.Paired = ref.Name, true
				res.RawRatio = ratio(summarise(samples, 0).P50, m)
			}
		}
	}
	if err != nil {
		res.Error = err.Error()
		return res
	}
	res.Stats = summarise(samples, cpu)
	return res
}

// timeOnce times the i-th cold run of t.
func (c Config) timeOnce(ctx context.Context, t Target, i int) (time.Duration, error) {
	run, done, err := t.Cold(ctx, i)
	if err != nil {
		return 0, err
	}
	defer done()
	rctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	t0 := time.Now()
	err = run(rctx)
	return time.Since(t0), err
}

// batchTarget is how long a batch of warm runs should take at least:
// long enough that the two clock reads around it (tens of nanoseconds
// each on a virtual machine) are a small share of it.
const batchTarget = 20 * time.Microsecond

// batchSize times a few single runs (untimed for the report) and returns
// how many to time together so that a batch lasts about batchTarget:
// 1 for a run that long already, at most 1000.
func batchSize(rctx context.Context, run Trial) int {
	best := time.Duration(1<<63 - 1)
	for range 5 {
		t0 := time.Now()
		if run(rctx) != nil {
			return 1 // the timed runs will report the error
		}
		best = min(best, time.Since(t0))
	}
	if best >= batchTarget {
		return 1
	}
	return int(min(1000, batchTarget/max(best, time.Nanosecond)+1))
}

// timeBatches times batches of k warm runs until more says stop, adding
// each batch's mean once per run it held.
func (c Config) timeBatches(rctx context.Context, run Trial, k int, samples *[]time.Duration, more func() bool) error {
	for more() {
		t0 := time.Now()
		for range k {
			if err := run(rctx); err != nil {
				return err
			}
		}
		mean := time.Since(t0) / time.Duration(k)
		if mean > c.timeout || errors.Is(rctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("run took longer than %v", c.timeout)
		}
		for range min(k, c.iterations-len(*samples)) {
			*samples = append(*samples, mean)
		}
	}
	return nil
}

// compareAll fills each tier's ratio to its raw engine and its peers.
func compareAll(results []Result, targets []Target) {
	byName := map[string]Target{}
	for _, t := range targets {
		byName[t.Name] = t
	}
	find := func(name, mode string) *Result {
		var cold *Result
		for i := range results {
			r := &results[i]
			if r.Name != name || r.Error != "" {
				continue
			}
			if r.Mode == mode {
				return r
			}
			if r.Mode == "cold" {
				cold = r
			}
		}
		return cold
	}
	for i := range results {
		r := &results[i]
		if r.Type != TypeTier || r.Error != "" {
			continue
		}
		for _, b := range targets {
			if b.Type == TypeTier || b.Workload != r.Workload || (len(b.For) > 0 && !slices.Contains(b.For, r.Name)) {
				continue
			}
			other := find(b.Name, r.Mode)
			if other == nil || other.P50 <= 0 {
				continue
			}
			if b.Type == TypeRaw && r.Raw == "" {
				r.Raw, r.RawRatio = b.Name, ratio(r.P50, other.P50)
				continue
			}
			r.Peers = append(r.Peers, PeerRatio{Name: b.Name, Ratio: ratio(r.P50, other.P50)})
		}
	}
	// Peers are compared with the raw engine of their workload too.
	for i := range results {
		r := &results[i]
		if r.Type != TypePeer || r.Error != "" {
			continue
		}
		if r.Paired {
			continue
		}
		if v := byName[r.Name].Versus; v != "" {
			if other := find(v, r.Mode); other != nil && other.P50 > 0 {
				r.Raw, r.RawRatio = v, ratio(r.P50, other.P50)
			}
			continue
		}
		for _, b := range targets {
			if b.Type != TypeRaw || b.Workload != r.Workload {
				continue
			}
			if other := find(b.Name, r.Mode); other != nil && other.P50 > 0 {
				r.Raw, r.RawRatio = b.Name, ratio(r.P50, other.P50)
				break
			}
		}
	}
}

// situation is one row of the "what does tier: auto cost" table.
type situation struct {
	name string
	job  airlock.Job
}

func situations() []situation {
	cmd := func(s airlock.Situation) airlock.Job {
		j := Job(airlock.KindCommand)
		j.Situation = s
		return j
	}
	return []situation{
		{"expression", Job(airlock.KindExpr)},
		{"hermetic script", Job(airlock.KindStarlark)},
		{"hermetic wasm", Job(airlock.KindWasm)},
		{"internal tooling", cmd(airlock.SituationInternal)},
		{"public code", cmd(airlock.SituationPublic)},
		{"multi-tenant", cmd(airlock.SituationMultiTenant)},
		{"credentials", cmd(airlock.SituationCredentials)},
	}
}

// route measures, for each situation, the tier the default policy picks and
// a warm run through the router; then the router's decision alone.
func (c Config) route(ctx context.Context, rep *Report, tiers []airlock.Tier, sits []situation, step func(string), done *int) error {
	r, err := escalate.New(escalate.DefaultPolicy(), tiers)
	if err != nil {
		return fmt.Errorf("building the router: %w", err)
	}
	for _, s := range sits {
		step("auto: " + s.name)
		job := s.job
		route := Route{Situation: s.name, Kind: job.Kind}
		t, err := r.Route(&job)
		if err != nil {
			var na *airlock.NotAdmitted
			if !errors.As(err, &na) {
				return err
			}
			route.Error = err.Error()
		} else {
			route.Tier = t.Name()
			m := c.measure(ctx, Target{
				Name: "auto", Workload: job.Kind,
				Warm: warmOnly(func(ctx context.Context) error {
					res, err := r.Run(ctx, job)
					return check(job.Kind, res, err)
				}),
			}, "warm")
			if m.Error != "" {
				route.Error = m.Error
			} else {
				route.Stats = &m.Stats
			}
		}
		rep.Routes = append(rep.Routes, route)
		*done++
	}
	step("router overhead")
	job := Job(airlock.KindExpr)
	if _, err := r.Route(&job); err == nil {
		const n = 200_000
		t0 := time.Now()
		for range n {
			_, _ = r.Route(&job)
		}
		cost := &RouterCost{RouteNS: round3(float64(time.Since(t0).Nanoseconds()) / n)}
		for _, rt := range rep.Routes {
			if rt.Situation == "expression" && rt.Stats != nil {
				for _, res := range rep.Results {
					if res.Name == rt.Tier && res.Mode == "warm" && res.Error == "" {
						cost.RunOverheadUS = round3(rt.Stats.P50 - res.P50)
					}
				}
			}
		}
		rep.Router = cost
	}
	*done++
	return nil
}

// Iterations returns the cap on runs per measurement.
func (c Config) Iterations() int { return c.iterations }

// Budget returns the time one measurement may take.
func (c Config) Budget() time.Duration { return c.budget }

// Timeout returns the longest a single run may take.
func (c Config) Timeout() time.Duration { return c.timeout }
