package wasm

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/airlock-sandbox/airlock"
)

// BenchmarkWasm compares the tier with raw wazero on a tiny module
// (corpus/wasm/add.wat): warm is a fresh instance of an already compiled
// module per run, cold a new runtime that compiles it first.
func BenchmarkWasm(b *testing.B) {
	mod := corpusWAT(b, "add")
	ctx := context.Background()
	b.Run("raw", func(b *testing.B) {
		rt := wazero.NewRuntime(ctx)
		defer rt.Close(ctx)
		cm, err := rt.CompileModule(ctx, mod)
		if err != nil {
			b.Fatal(err)
		}
		mc := wazero.NewModuleConfig().WithName("")
		b.ReportAllocs()
		for b.Loop() {
			m, err := rt.InstantiateModule(ctx, cm, mc)
			if err != nil {
				b.Fatal(err)
			}
			if r, err := m.ExportedFunction("add").Call(ctx, 40, 2); err != nil || r[0] != 42 {
				b.Fatal(err, r)
			}
			_ = m.Close(ctx)
		}
	})
	b.Run("tier", func(b *testing.B) {
		tier, err := New(NewConfig())
		if err != nil {
			b.Fatal(err)
		}
		defer tier.Close()
		job := airlock.Job{Kind: airlock.KindWasm, Module: mod, Entry: "add", Input: map[string]any{"args": []any{int64(40), int64(2)}}}
		b.ReportAllocs()
		for b.Loop() {
			res, err := tier.Run(ctx, job)
			if err != nil || res.Value != int64(42) {
				b.Fatal(err, res.Value)
			}
		}
	})
	b.Run("raw-cold", func(b *testing.B) {
		for b.Loop() {
			rt := wazero.NewRuntime(ctx)
			m, err := rt.Instantiate(ctx, mod)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := m.ExportedFunction("add").Call(ctx, 40, 2); err != nil {
				b.Fatal(err)
			}
			_ = rt.Close(ctx)
		}
	})
	b.Run("tier-cold", func(b *testing.B) {
		job := airlock.Job{Kind: airlock.KindWasm, Module: mod, Entry: "add", Argv: []string{"40", "2"}}
		for b.Loop() {
			tier, err := New(NewConfig())
			if err != nil {
				b.Fatal(err)
			}
			if _, err := tier.Run(ctx, job); err != nil {
				b.Fatal(err)
			}
			_ = tier.Close()
		}
	})
}

// BenchmarkPlugin is one call of the example Go tool (a fresh instance,
// including the Go runtime's initialisation) against raw wazero doing the
// same.
func BenchmarkPlugin(b *testing.B) {
	mod := greetTool(b)
	ctx := context.Background()
	b.Run("raw", func(b *testing.B) {
		// wazero with WASI and the same host module (which the tool
		// imports), default runtime config, no caps.
		rt := wazero.NewRuntime(ctx)
		defer rt.Close(ctx)
		wasi_snapshot_preview1.MustInstantiate(ctx, rt)
		if err := instantiateHost(ctx, rt); err != nil {
			b.Fatal(err)
		}
		cm, err := rt.CompileModule(ctx, mod)
		if err != nil {
			b.Fatal(err)
		}
		mc := wazero.NewModuleConfig().WithName("").WithStartFunctions("_initialize")
		for b.Loop() {
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
		}
	})
	b.Run("tier", func(b *testing.B) {
		h, err := NewHost(NewConfig())
		if err != nil {
			b.Fatal(err)
		}
		defer h.Close()
		tool, err := h.Load(ctx, mod, ToolConfig{})
		if err != nil {
			b.Fatal(err)
		}
		defer tool.Close()
		for b.Loop() {
			if rep, err := tool.Call(ctx, "upper", []byte("x")); err != nil || string(rep.Output) != "X" {
				b.Fatal(err)
			}
		}
	})
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

// BenchmarkDiskCache starts a new process per iteration that runs the Go
// test program (3 MB of wasip1) once: "off" compiles it every time, "warm"
// finds the machine code in an on-disk cache a previous process filled.
func BenchmarkDiskCache(b *testing.B) {
	path := buildDir + "/bench-guest.wasm"
	if err := os.WriteFile(path, guest(b), 0o644); err != nil {
		b.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	spawn := func(b *testing.B, cache string) {
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), helperEnv+"="+path, "AIRLOCK_WASM_BENCH_CACHE="+cache)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("helper: %v\n%s", err, out)
		}
	}
	b.Run("off", func(b *testing.B) {
		for b.Loop() {
			spawn(b, "")
		}
	})
	b.Run("warm", func(b *testing.B) {
		cache := b.TempDir()
		spawn(b, cache) // fill it
		for b.Loop() {
			spawn(b, cache)
		}
	})
}
