package expr_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	exprlang "github.com/expr-lang/expr"
	"github.com/expr-lang/expr/vm"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/escalate"
	"github.com/airlock-sandbox/airlock/internal/monotime"
	"github.com/airlock-sandbox/airlock/internal/testing/pairbench"
	"github.com/airlock-sandbox/airlock/interp/expr"
)

// The workload the issue names: a small arithmetic expression over input.
const benchCode = "x * 2 + 1"

func benchInput() map[string]any { return map[string]any{"x": int64(21)} }

// BenchmarkExpr compares plain expr-lang/expr with a Job through the router
// and the tier to a Result, warm (compiled program cached) and cold
// (compile every time), in the same run. Compare sub-benchmarks pairwise.
func BenchmarkExpr(b *testing.B) {
	// The clock's counter calibrates in a process's first half second;
	// the warm figures stand for a long-running host.
	monotime.WarmUp(2 * time.Second)
	b.Run("warm/raw", func(b *testing.B) {
		prog, err := exprlang.Compile(benchCode)
		if err != nil {
			b.Fatal(err)
		}
		env := benchInput()
		var machine vm.VM
		b.ReportAllocs()
		for b.Loop() {
			if _, err := machine.Run(prog, env); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("warm/tier", func(b *testing.B) {
		r, err := escalate.New(escalate.DefaultPolicy(), []airlock.Tier{expr.New()})
		if err != nil {
			b.Fatal(err)
		}
		job := airlock.Job{Kind: airlock.KindExpr, Code: benchCode, Input: benchInput()}
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			if _, err := r.Run(ctx, job); err != nil {
				b.Fatal(err)
			}
		}
	})
	// Cold: a distinct source each iteration, so nothing is cached.
	b.Run("cold/raw", func(b *testing.B) {
		env := benchInput()
		i := 0
		b.ReportAllocs()
		for b.Loop() {
			i++
			prog, err := exprlang.Compile(fmt.Sprintf("x * 2 + %d", i))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := exprlang.Run(prog, env); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("cold/tier", func(b *testing.B) {
		r, err := escalate.New(escalate.DefaultPolicy(), []airlock.Tier{expr.NewWithConfig(expr.NewConfig().WithCacheSize(1))})
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		i := 0
		b.ReportAllocs()
		for b.Loop() {
			i++
			job := airlock.Job{Kind: airlock.KindExpr, Code: fmt.Sprintf("x * 2 + %d", i), Input: benchInput()}
			if _, err := r.Run(ctx, job); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkExprPaired alternates raw and tier in one loop (see package
// pairbench): warm and cold for the workload over input, and warm
// and cold for `1+1`, the workload of `airlock bench`.
func BenchmarkExprPaired(b *testing.B) {
	monotime.WarmUp(2 * time.Second)
	ctx := context.Background()
	for _, w := range []struct {
		name, code string
		input      func() map[string]any
	}{
		{"", benchCode, benchInput},
		{"1+1/", "1+1", func() map[string]any { return nil }},
	} {
		b.Run(w.name+"warm", func(b *testing.B) {
			r, err := escalate.New(escalate.DefaultPolicy(), []airlock.Tier{expr.New()})
			if err != nil {
				b.Fatal(err)
			}
			prog, err := exprlang.Compile(w.code)
			if err != nil {
				b.Fatal(err)
			}
			env := w.input()
			var machine vm.VM
			job := airlock.Job{Kind: airlock.KindExpr, Code: w.code, Input: w.input()}
			pairbench.Run(b, 64, func() error {
				_, err := machine.Run(prog, env)
				return err
			}, func() error {
				_, err := r.Run(ctx, job)
				return err
			})
		})
		b.Run(w.name+"cold", func(b *testing.B) {
			r, err := escalate.New(escalate.DefaultPolicy(), []airlock.Tier{expr.NewWithConfig(expr.NewConfig().WithCacheSize(1))})
			if err != nil {
				b.Fatal(err)
			}
			env := w.input()
			i, j := 0, 0 // a new source on each side every call
			pairbench.Run(b, 4, func() error {
				i++
				prog, err := exprlang.Compile(fmt.Sprintf("%s + %d", w.code, i))
				if err != nil {
					return err
				}
				_, err = exprlang.Run(prog, env)
				return err
			}, func() error {
				j++
				job := airlock.Job{Kind: airlock.KindExpr, Code: fmt.Sprintf("%s + %d", w.code, j), Input: w.input()}
				_, err := r.Run(ctx, job)
				return err
			})
		})
	}
}
