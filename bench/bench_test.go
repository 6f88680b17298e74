package bench

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/tierset"
)

// The hand-assembled module is valid WebAssembly, returns 2, and stays
// valid with a salt (a custom section) appended.
func TestWasmModule(t *testing.T) {
	ctx := context.Background()
	r := wazero.NewRuntime(ctx)
	defer r.Close(ctx)
	for _, salt := range []uint64{0, 1, 1 << 60} {
		m, err := r.Instantiate(ctx, WasmModule(salt))
		if err != nil {
			t.Fatalf("salt %d: %v", salt, err)
		}
		out, err := m.ExportedFunction(WasmEntry).Call(ctx)
		if err != nil || len(out) != 1 || out[0] != 2 {
			t.Fatalf("salt %d: %v %v", salt, out, err)
		}
		_ = m.Close(ctx)
	}
	if bytes.Equal(WasmModule(1), WasmModule(2)) {
		t.Fatal("salts do not change the bytes")
	}
}

func TestSummarise(t *testing.T) {
	var s []time.Duration
	for i := 100; i >= 1; i-- {
		s = append(s, time.Duration(i)*time.Microsecond)
	}
	st := summarise(s, 200*time.Microsecond)
	want := Stats{N: 100, P50: 50, P95: 95, P99: 99, Min: 1, Max: 100, Mean: 50.5, CPU: 2}
	if st != want {
		t.Fatalf("got %+v, want %+v", st, want)
	}
	if got := summarise(nil, 0); got.N != 0 {
		t.Fatalf("empty: %+v", got)
	}
}

func TestBadConfig(t *testing.T) {
	ctx := context.Background()
	for name, c := range map[string]Config{
		"iterations": NewConfig().WithIterations(0),
		"budget":     NewConfig().WithBudget(0),
		"timeout":    NewConfig().WithTimeout(-1),
		"tier":       NewConfig().WithTiers("no-such-tier"),
	} {
		if _, err := Run(ctx, c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// A short run over the interpreter tiers: every tier and its raw engine
// and peers are measured and compared, the router's choices recorded, and
// the report survives JSON, the table, the chart and a comparison.
func TestRun(t *testing.T) {
	var steps []Progress
	c := NewConfig().WithSources(commandSources()...).WithTiers("expr", "starlark").WithIterations(30).WithBudget(50 * time.Millisecond).
		WithProgress(func(p Progress) { steps = append(steps, p) })
	rep, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Result{}
	for _, r := range rep.Results {
		if r.Error != "" {
			t.Errorf("%s %s: %s", r.Name, r.Mode, r.Error)
		}
		got[r.Name+"/"+r.Mode] = r
	}
	for _, k := range []string{"expr/cold", "expr/warm", "starlark/cold", "starlark/warm", "raw-expr/cold", "raw-expr/warm", "cel-go/warm", "raw-starlark/warm"} {
		r, ok := got[k]
		if !ok {
			t.Errorf("%s not measured", k)
			continue
		}
		if r.N < 5 || r.P50 <= 0 || r.Min > r.P50 || r.P50 > r.P95 || r.P95 > r.P99 || r.P99 > r.Max {
			t.Errorf("%s: implausible stats %+v", k, r.Stats)
		}
	}
	if e := got["expr/warm"]; e.Raw != "raw-expr" || e.RawRatio <= 0 || len(e.Peers) == 0 || e.Peers[0].Name != "cel-go" {
		t.Errorf("expr warm comparisons: raw %q %v, peers %+v", e.Raw, e.RawRatio, e.Peers)
	}
	if s := got["starlark/cold"]; s.Raw != "raw-starlark" || s.RawRatio <= 0 {
		t.Errorf("starlark cold comparison: %q %v", s.Raw, s.RawRatio)
	}
	if _, ok := got["raw-wazero/cold"]; ok {
		t.Error("raw wazero measured though no wasm tier was selected")
	}
	routes := map[string]Route{}
	for _, r := range rep.Routes {
		routes[r.Situation] = r
	}
	if r := routes["expression"]; r.Tier != "expr" || r.Stats == nil {
		t.Errorf("expression route: %+v", r)
	}
	if r := routes["credentials"]; r.Tier != "" || r.Error == "" {
		t.Errorf("credentials route (no level-5 tier selected): %+v", r)
	}
	if rep.Router == nil || rep.Router.RouteNS <= 0 {
		t.Errorf("router cost: %+v", rep.Router)
	}
	if len(steps) == 0 || steps[len(steps)-1].Label != "done" || steps[len(steps)-1].Done != steps[len(steps)-1].Total {
		t.Errorf("progress: %+v", steps)
	}
	if rep.Machine.Cores < 1 || rep.Machine.Go == "" || rep.Machine.Kernel == "" || rep.Schema != Schema {
		t.Errorf("machine facts: %+v", rep.Machine)
	}

	dir := t.TempDir()
	path := filepath.Join(dir, "report.json")
	var buf bytes.Buffer
	if err := rep.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	old, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(old.Results) != len(rep.Results) || old.Results[0].Name != rep.Results[0].Name || old.Results[0].Stats != rep.Results[0].Stats {
		t.Fatalf("round trip lost results")
	}
	var table, cmp bytes.Buffer
	rep.WriteTable(&table)
	rep.WriteCompare(&cmp, old)
	for _, s := range []string{"raw-expr", "cel-go", "tier: auto", "router:"} {
		if !strings.Contains(table.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, table.String())
		}
	}
	if !strings.Contains(cmp.String(), "+0.0%") {
		t.Errorf("comparison with itself:\n%s", cmp.String())
	}
	for _, name := range []string{"chart.svg", "chart.png"} {
		p := filepath.Join(dir, name)
		if err := rep.SaveChart(p); err != nil {
			t.Fatal(err)
		}
		if st, err := os.Stat(p); err != nil || st.Size() < 1000 {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := os.WriteFile(path, []byte(`{"schema":"other"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err == nil {
		t.Error("a report of another schema was accepted")
	}
}

// commandSources are the airlock command's tiers, as `airlock bench`
// measures them.
func commandSources() []TierSource {
	var out []TierSource
	for _, e := range tierset.Entries() {
		f := TierSource{Name: e.Name, New: func() (airlock.Tier, error) { return e.New(tierset.Options{}) }}
		if e.Pooled {
			f.Warm = func() (airlock.Tier, error) { return e.New(tierset.Options{}.Warm()) }
		}
		out = append(out, f)
	}
	return out
}

// BenchmarkStartup measures the airlock command's tiers and every
// baseline, cold and warm, side by side (go test -bench Startup ./bench).
func BenchmarkStartup(b *testing.B) {
	ctx := context.Background()
	var targets []Target
	for _, f := range commandSources() {
		t, err := f.New()
		if err != nil {
			b.Fatal(err)
		}
		defer closeTier(t)
		kind, err := kindOf(t)
		if err != nil {
			continue
		}
		targets = append(targets, tierTarget(f, t, kind))
	}
	targets = append(targets, Baselines()...)
	for _, t := range targets {
		if err := t.Available(); err != nil {
			b.Logf("%s skipped: %v", t.Name, err)
			continue
		}
		b.Run(t.Name+"/cold", func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				run, done, err := t.Cold(ctx, i)
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				err = run(ctx)
				b.StopTimer()
				done()
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
		if t.Warm == nil {
			continue
		}
		b.Run(t.Name+"/warm", func(b *testing.B) {
			run, done, err := t.Warm(ctx)
			if err != nil {
				b.Fatal(err)
			}
			defer done()
			for b.Loop() {
				if err := run(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// envTier returns 2 only when it was built as the warm form.
type envTier struct{ warm bool }

func (envTier) Name() string            { return "bench-test-warm" }
func (envTier) Level() airlock.Level    { return airlock.LevelInterpreter }
func (envTier) Admit(airlock.Job) error { return nil }
func (t envTier) Run(context.Context, airlock.Job) (airlock.Result, error) {
	if !t.warm {
		return airlock.Result{Value: 0}, nil
	}
	return airlock.Result{Value: 2}, nil
}

// A source's warm form serves the warm runs; cold runs use its default
// build.
func TestWarmSource(t *testing.T) {
	f := TierSource{Name: "bench-test-warm",
		New:  func() (airlock.Tier, error) { return envTier{}, nil },
		Warm: func() (airlock.Tier, error) { return envTier{warm: true}, nil },
	}
	shared, _ := f.New()
	target := tierTarget(f, shared, airlock.KindExpr)
	ctx := context.Background()
	run, done, err := target.Warm(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	if err := run(ctx); err != nil {
		t.Fatalf("warm run on a tier built without the warm form: %v", err)
	}
	cold, doneCold, err := target.Cold(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer doneCold()
	if err := cold(ctx); err == nil {
		t.Fatal("the cold build was the warm form")
	}
}

// poolTier holds one "sandbox" at a time: a run claims it (failing when the
// pool is empty) and a background refill puts a new one back after a delay.
type poolTier struct {
	slot    chan struct{}
	refill  time.Duration
	waits   *int
	pending chan struct{} // one refill in flight
}

func newPoolTier(refill time.Duration) *poolTier {
	p := &poolTier{slot: make(chan struct{}, 1), refill: refill, waits: new(int), pending: make(chan struct{}, 1)}
	p.slot <- struct{}{}
	return p
}

func (*poolTier) Name() string            { return "bench-test-pool" }
func (*poolTier) Level() airlock.Level    { return airlock.LevelInterpreter }
func (*poolTier) Admit(airlock.Job) error { return nil }
func (p *poolTier) Run(context.Context, airlock.Job) (airlock.Result, error) {
	select {
	case <-p.slot:
	default:
		return airlock.Result{}, errors.New("pool empty: the claim did not wait for the refill")
	}
	p.pending <- struct{}{}
	go func() {
		time.Sleep(p.refill)
		p.slot <- struct{}{}
		<-p.pending
	}()
	return airlock.Result{Value: 2}, nil
}

// PoolStats makes it an airlock.Pooler; the counts are not under test.
func (p *poolTier) PoolStats() airlock.PoolStats { return airlock.PoolStats{} }

func (p *poolTier) WaitWarm(ctx context.Context) error {
	*p.waits++
	for {
		if len(p.slot) == 1 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

// A tier with a pool is measured claim by claim: the benchmark waits
// (untimed) for the pool to refill before every warm run, so no run finds
// it empty.
func TestWarmSettlesPool(t *testing.T) {
	p := newPoolTier(5 * time.Millisecond)
	f := TierSource{Name: "bench-test-pool", New: func() (airlock.Tier, error) { return p, nil }}
	target := tierTarget(f, p, airlock.KindExpr)
	if target.Settle == nil {
		t.Fatal("a pooled tier got no Settle")
	}
	res := NewConfig().WithIterations(8).measure(context.Background(), target, "warm")
	if res.Error != "" {
		t.Fatalf("warm runs of a pooled tier: %s", res.Error)
	}
	if res.Stats.N != 8 || *p.waits != 9 {
		t.Fatalf("runs %d, pool waits %d; want 8 runs after 9 waits (one before the untimed first run)", res.Stats.N, *p.waits)
	}
	// A tier without a pool gets no Settle, so its warm runs stay tight.
	if plain := tierTarget(f, envTier{}, airlock.KindExpr); plain.Settle != nil {
		t.Fatal("a tier without a pool got a Settle")
	}
}

// Warm runs far shorter than a clock read are timed in batches, each
// sample its batch's mean; the run count stays the cap; a run as long as
// a batch is timed alone; an error inside a batch is reported.
func TestWarmBatches(t *testing.T) {
	fast := Target{Name: "fast", Warm: warmOnly(func(context.Context) error { return nil })}
	res := NewConfig().WithIterations(5000).measure(context.Background(), fast, "warm")
	if res.Error != "" || res.N != 5000 || res.Batch < 2 || res.Batch > 1000 {
		t.Fatalf("fast runs: error %q, n %d, batch %d; want 5000 runs in batches of 2 to 1000", res.Error, res.N, res.Batch)
	}
	slow := Target{Name: "slow", Warm: warmOnly(func(context.Context) error { time.Sleep(2 * batchTarget); return nil })}
	if res := NewConfig().WithIterations(6).measure(context.Background(), slow, "warm"); res.Error != "" || res.N != 6 || res.Batch != 0 {
		t.Fatalf("slow runs: error %q, n %d, batch %d; want 6 runs timed alone", res.Error, res.N, res.Batch)
	}
	calls := 0
	failing := Target{Name: "failing", Warm: warmOnly(func(context.Context) error {
		if calls++; calls > 50 {
			return errors.New("broke")
		}
		return nil
	})}
	if res := NewConfig().measure(context.Background(), failing, "warm"); !strings.Contains(res.Error, "broke") {
		t.Fatalf("a run failing inside a batch: error %q", res.Error)
	}
	var out strings.Builder
	(&Report{Results: []Result{res, {Name: "fast", Mode: "warm", Stats: Stats{N: 1, Batch: 40}}}}).WriteTable(&out)
	if !strings.Contains(out.String(), "fast warm ×40") {
		t.Fatalf("the table does not say which runs were batched:\n%s", out.String())
	}
}

// accelTier runs under an accelerator and refuses every job alike.
type accelTier struct{ envTier }

func (accelTier) Accelerator() string     { return "tcg" }
func (accelTier) Admit(airlock.Job) error { return errors.New("no guest here") }

// A tier that runs guests has its accelerator on every row of the table
// (and in the report); one that admits none of the workloads is skipped
// with each different refusal once.
func TestAccelAndSkipReason(t *testing.T) {
	f := TierSource{Name: "bench-test-accel", New: func() (airlock.Tier, error) { return accelTier{}, nil }}
	target := tierTarget(f, accelTier{}, airlock.KindExpr)
	res := NewConfig().WithIterations(5).measure(context.Background(), target, "cold")
	if res.Accel != "tcg" || res.Label() != "bench-test-accel (tcg)" {
		t.Fatalf("accel %q, label %q", res.Accel, res.Label())
	}
	var table strings.Builder
	(&Report{Results: []Result{res}}).WriteTable(&table)
	if !strings.Contains(table.String(), "bench-test-accel (tcg)") {
		t.Fatalf("the table does not say the accelerator:\n%s", table.String())
	}
	if plain := tierTarget(f, envTier{}, airlock.KindExpr); plain.Accel != nil {
		t.Fatal("a tier without an accelerator got one")
	}
	_, err := kindOf(accelTier{})
	if err == nil || strings.Count(err.Error(), "no guest here") != 1 || strings.Contains(err.Error(), "\n") {
		t.Fatalf("skip reason: %v", err)
	}
}

// A whole-process row's cold runs alternate with its reference's, and
// its ratio is to those runs (paired), which compareAll keeps.
func TestPairedRuns(t *testing.T) {
	var order []string
	cold := func(name string) func(context.Context, int) (Trial, func(), error) {
		return func(context.Context, int) (Trial, func(), error) {
			return func(context.Context) error { order = append(order, name); return nil }, noop, nil
		}
	}
	ref := Target{Name: "bench-test-ref", Type: TypeRaw, Workload: airlock.KindCommand, Available: always, Cold: cold("ref")}
	row := Target{Name: "bench-test-cli", Type: TypePeer, Workload: airlock.KindCommand, Available: always, Versus: ref.Name, Cold: cold("cli")}
	live := []Target{ref, row}
	if got := pairedRef(ref, live); got != nil {
		t.Fatalf("a target without Versus got a pair: %v", got.Name)
	}
	res := NewConfig().WithIterations(6).measurePaired(context.Background(), row, pairedRef(row, live), "cold")
	if res.Error != "" || res.N != 6 {
		t.Fatalf("paired runs: %+v", res)
	}
	if want := strings.Repeat("ref cli ", 6); strings.Join(order, " ")+" " != want {
		t.Fatalf("run order %v, want alternating ref and cli", order)
	}
	if !res.Paired || res.Raw != ref.Name || res.RawRatio <= 0 {
		t.Fatalf("paired ratio: raw %q %v, paired %v", res.Raw, res.RawRatio, res.Paired)
	}
	kept := res.RawRatio
	results := []Result{{Name: ref.Name, Type: TypeRaw, Workload: airlock.KindCommand, Mode: "cold", Stats: Stats{N: 1, P50: 1e9}}, res}
	compareAll(results, live)
	if results[1].RawRatio != kept {
		t.Fatalf("compareAll replaced the paired ratio %v with %v", kept, results[1].RawRatio)
	}
	var table strings.Builder
	(&Report{Results: results}).WriteTable(&table)
	if !strings.Contains(table.String(), ref.Name+" (paired)") {
		t.Fatalf("the table does not say the ratio is paired:\n%s", table.String())
	}
}

// The chart shows each tier beside its raw engine and its peers, then
// what no tier was compared with; a failed target is left out.
func TestChartOrder(t *testing.T) {
	results := []Result{
		{Name: "expr", Type: TypeTier, Mode: "cold", Raw: "raw-expr", Peers: []PeerRatio{{Name: "cel-go"}}},
		{Name: "gvisor", Type: TypeTier, Mode: "cold", Raw: "runsc-run", Peers: []PeerRatio{{Name: "cli-run-gvisor"}}},
		{Name: "gvisor", Type: TypeTier, Mode: "warm", Raw: "runsc-run", Peers: []PeerRatio{{Name: "runsc-run-tier"}}},
		{Name: "broken", Type: TypeTier, Mode: "cold", Error: "failed"},
		{Name: "raw-expr", Type: TypeRaw, Mode: "cold"},
		{Name: "cel-go", Type: TypePeer, Mode: "cold"},
		{Name: "runsc-run", Type: TypeRaw, Mode: "cold"},
		{Name: "qemu-boot", Type: TypeRaw, Mode: "cold"},
		{Name: "cli-run-gvisor", Type: TypePeer, Mode: "cold", Raw: "runsc-run-tier"},
		{Name: "runsc-run-tier", Type: TypeRaw, Mode: "cold"},
	}
	got := strings.Join(chartOrder(results), " ")
	want := "expr raw-expr cel-go gvisor runsc-run cli-run-gvisor runsc-run-tier qemu-boot"
	if got != want {
		t.Errorf("chart order %q, want %q", got, want)
	}
}
