package wasm

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/airlock-sandbox/airlock"
)

// A subject is one way of running a benchmark's workload once; setup
// returns it with its cleanup.
type subject func(b *testing.B) (run func(), cleanup func())

// rawAdd is raw wazero: a fresh instance of the compiled tiny module
// (corpus/wasm/add.wat) and a call of its export, default runtime config.
func rawAdd(b *testing.B) (func(), func()) {
	ctx := context.Background()
	mod := corpusWAT(b, "add")
	rt := wazero.NewRuntime(ctx)
	cm, err := rt.CompileModule(ctx, mod)
	if err != nil {
		b.Fatal(err)
	}
	mc := wazero.NewModuleConfig().WithName("")
	return func() {
		m, err := rt.InstantiateModule(ctx, cm, mc)
		if err != nil {
			b.Fatal(err)
		}
		if r, err := m.ExportedFunction("add").Call(ctx, 40, 2); err != nil || r[0] != 42 {
			b.Fatal(err, r)
		}
		_ = m.Close(ctx)
	}, func() { _ = rt.Close(ctx) }
}

// tierAdd is the same through a Job.
func tierAdd(b *testing.B) (func(), func()) {
	tier, err := New(NewConfig())
	if err != nil {
		b.Fatal(err)
	}
	job := airlock.Job{Kind: airlock.KindWasm, Module: corpusWAT(b, "add"), Entry: "add", Input: map[string]any{"args": []any{int64(40), int64(2)}}}
	return func() {
		res, err := tier.Run(context.Background(), job)
		if err != nil || res.Value != int64(42) {
			b.Fatal(err, res.Value)
		}
	}, func() { _ = tier.Close() }
}

// rawTool is raw wazero running one call of the example Go tool: WASI and
// airlock's host module (which the tool imports), default runtime config,
// a fresh instance (Go runtime initialisation included) per call.
func rawTool(b *testing.B) (func(), func()) {
	ctx := context.Background()
	rt := wazero.NewRuntime(ctx)
	wasi_snapshot_preview1.MustInstantiate(ctx, rt)
	if err := instantiateHost(ctx, rt); err != nil {
		b.Fatal(err)
	}
	cm, err := rt.CompileModule(ctx, greetTool(b))
	if err != nil {
		b.Fatal(err)
	}
	mc := wazero.NewModuleConfig().WithName("").WithStartFunctions("_initialize")
	return func() {
		st := &hostState{input: []byte("x"), respCap: 1 << 20}
		cctx := context.WithValue(ctx, stateKey{}, st)
		m, err := rt.InstantiateModule(cctx, cm, mc)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := m.ExportedFunction("upper").Call(cctx); err != nil || st.output.String() != "X" {
			b.Fatal(err)
		}
		_ = m.Close(ctx)
	}, func() { _ = rt.Close(ctx) }
}

// tierTool is the same call through the plugin host.
func tierTool(b *testing.B) (func(), func()) {
	h, err := NewHost(NewConfig())
	if err != nil {
		b.Fatal(err)
	}
	tool, err := h.Load(context.Background(), greetTool(b), ToolConfig{})
	if err != nil {
		b.Fatal(err)
	}
	return func() {
			if rep, err := tool.Call(context.Background(), "upper", []byte("x")); err != nil || string(rep.Output) != "X" {
				b.Fatal(err)
			}
		}, func() {
			_ = tool.Close()
			_ = h.Close()
		}
}

// cold builds a new runtime (or tier) per run: compile, instantiate, call.
func rawAddCold(b *testing.B) (func(), func()) {
	ctx := context.Background()
	mod := corpusWAT(b, "add")
	return func() {
		rt := wazero.NewRuntime(ctx)
		m, err := rt.Instantiate(ctx, mod)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := m.ExportedFunction("add").Call(ctx, 40, 2); err != nil {
			b.Fatal(err)
		}
		_ = rt.Close(ctx)
	}, func() {}
}

func tierAddCold(b *testing.B) (func(), func()) {
	job := airlock.Job{Kind: airlock.KindWasm, Module: corpusWAT(b, "add"), Entry: "add", Argv: []string{"40", "2"}}
	return func() {
		tier, err := New(NewConfig())
		if err != nil {
			b.Fatal(err)
		}
		if _, err := tier.Run(context.Background(), job); err != nil {
			b.Fatal(err)
		}
		_ = tier.Close()
	}, func() {}
}

func loop(s subject) func(b *testing.B) {
	return func(b *testing.B) {
		run, cleanup := s(b)
		defer cleanup()
		b.ReportAllocs()
		for b.Loop() {
			run()
		}
	}
}

// BenchmarkWasm compares the tier with raw wazero on a tiny module: warm
// is a fresh instance of an already compiled module per run, cold a new
// runtime that compiles it first.
func BenchmarkWasm(b *testing.B) {
	b.Run("raw", loop(rawAdd))
	b.Run("tier", loop(tierAdd))
	b.Run("raw-cold", loop(rawAddCold))
	b.Run("tier-cold", loop(tierAddCold))
}

// BenchmarkPlugin is one call of the example Go tool in a fresh instance.
func BenchmarkPlugin(b *testing.B) {
	b.Run("raw", loop(rawTool))
	b.Run("tier", loop(tierTool))
}

// BenchmarkInterleaved alternates raw and tier runs one by one and reports
// the median of each and their ratio: on a shared, loaded machine the
// load drifts between two separate benchmarks, but not between two
// neighbouring runs.
func BenchmarkInterleaved(b *testing.B) {
	pairs := []struct {
		name      string
		raw, tier subject
	}{
		{"warm", rawAdd, tierAdd},
		{"cold", rawAddCold, tierAddCold},
		{"plugin", rawTool, tierTool},
	}
	for _, p := range pairs {
		b.Run(p.name, func(b *testing.B) {
			raw, rawDone := p.raw(b)
			defer rawDone()
			tier, tierDone := p.tier(b)
			defer tierDone()
			var rs, ts []float64
			for b.Loop() {
				t0 := time.Now()
				raw()
				t1 := time.Now()
				tier()
				rs = append(rs, float64(t1.Sub(t0).Nanoseconds()))
				ts = append(ts, float64(time.Since(t1).Nanoseconds()))
			}
			r, t := median(rs), median(ts)
			b.ReportMetric(r, "raw-ns/op")
			b.ReportMetric(t, "tier-ns/op")
			b.ReportMetric(t/r, "tier/raw")
		})
	}
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

// helperEnv makes the test binary a one-shot process that runs a module
// once and exits: the subject of BenchmarkDiskCache.
const helperEnv = "AIRLOCK_WASM_BENCH_HELPER"

// runHelper runs the module named by $AIRLOCK_WASM_BENCH_HELPER once, with
// the on-disk cache in $AIRLOCK_WASM_BENCH_CACHE (if set).
func runHelper() int {
	mod, err := os.ReadFile(os.Getenv(helperEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cfg := NewConfig()
	if d := os.Getenv("AIRLOCK_WASM_BENCH_CACHE"); d != "" {
		cfg = cfg.WithCacheDir(d)
	}
	tier, err := New(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer tier.Close()
	res, err := tier.Run(context.Background(), airlock.Job{Kind: airlock.KindWasm, Module: mod, Argv: []string{"hello"}})
	if err != nil || res.Stdout != "hello from wasm\n" {
		fmt.Fprintln(os.Stderr, err, res.Stdout)
		return 1
	}
	return 0
}

// BenchmarkDiskCache starts a new process per run that runs the Go test
// program (3 MB of wasip1) once: "off" compiles it every time, "warm" finds
// the machine code in an on-disk cache that a previous process filled. The
// two alternate, and the medians and their ratio are reported.
func BenchmarkDiskCache(b *testing.B) {
	path := buildDir + "/bench-guest.wasm"
	if err := os.WriteFile(path, guest(b), 0o644); err != nil {
		b.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	spawn := func(cache string) float64 {
		t0 := time.Now()
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), helperEnv+"="+path, "AIRLOCK_WASM_BENCH_CACHE="+cache)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("helper: %v\n%s", err, out)
		}
		return float64(time.Since(t0).Nanoseconds())
	}
	cache := b.TempDir()
	spawn(cache) // fill it
	var off, warm []float64
	for b.Loop() {
		off = append(off, spawn(""))
		warm = append(warm, spawn(cache))
	}
	b.ReportMetric(median(off), "off-ns/op")
	b.ReportMetric(median(warm), "warm-ns/op")
	b.ReportMetric(median(off)/median(warm), "off/warm")
}
