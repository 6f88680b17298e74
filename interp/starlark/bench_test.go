package starlark_test

import (
	"context"
	"testing"
	"time"

	sl "go.starlark.net/starlark"
	"go.starlark.net/syntax"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/testing/pairbench"
	"github.com/airlock-sandbox/airlock/interp/starlark"
)

// benchLoop is the 10-iteration loop both sides run.
const benchLoop = "x = 0\nfor i in range(10):\n    x += i\nresult = x\n"

var rawOptions = &syntax.FileOptions{Set: true, While: true, TopLevelControl: true, GlobalReassign: true}

// BenchmarkStarlark compares the tier with plain go.starlark.net in the same
// run: warm (a compiled program on a fresh thread, against a job through
// the tier's Run with its program cache warm) and cold (compile and run).
func BenchmarkStarlark(b *testing.B) {
	b.Run("raw", func(b *testing.B) {
		_, prog, err := sl.SourceProgramOptions(rawOptions, "job.star", benchLoop, sl.StringDict{}.Has)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			g, err := prog.Init(&sl.Thread{}, nil)
			if err != nil || g["result"] != sl.MakeInt(45) {
				b.Fatal(err, g["result"])
			}
			g.Freeze() // as ExecFileOptions does
		}
	})
	tier, err := starlark.New(starlark.NewConfig())
	if err != nil {
		b.Fatal(err)
	}
	j := airlock.Job{Kind: airlock.KindStarlark, Code: benchLoop}
	b.Run("tier", func(b *testing.B) { benchTier(b, tier, j) })
	// Clock and seed pinned, as a replayed job has them: no clock read and
	// no random seed drawn by LimitPolicy.Prepare.
	pinned := j
	pinned.Clock, pinned.Seed = time.Unix(1e9, 0).UTC(), 1
	b.Run("tier-pinned", func(b *testing.B) { benchTier(b, tier, pinned) })
	b.Run("raw-cold", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, prog, err := sl.SourceProgramOptions(rawOptions, "job.star", benchLoop, sl.StringDict{}.Has)
			if err != nil {
				b.Fatal(err)
			}
			g, err := prog.Init(&sl.Thread{}, nil)
			if err != nil {
				b.Fatal(err)
			}
			g.Freeze()
		}
	})
	cold, err := starlark.New(starlark.NewConfig().WithCacheSize(0))
	if err != nil {
		b.Fatal(err)
	}
	b.Run("tier-cold", func(b *testing.B) { benchTier(b, cold, j) })
}

func benchTier(b *testing.B, tier *starlark.Tier, j airlock.Job) {
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		res, err := tier.Run(ctx, j)
		if err != nil || res.Value != int64(45) {
			b.Fatal(err, res.Value)
		}
	}
}

// BenchmarkStarlarkPaired alternates raw and tier runs in one loop and
// reports each side's mean, so both see the same machine load; on a shared
// machine the ratio is steadier than between separate sub-benchmarks.
func BenchmarkStarlarkPaired(b *testing.B) {
	ctx := context.Background()
	tier, err := starlark.New(starlark.NewConfig())
	if err != nil {
		b.Fatal(err)
	}
	cold, err := starlark.New(starlark.NewConfig().WithCacheSize(0))
	if err != nil {
		b.Fatal(err)
	}
	j := airlock.Job{Kind: airlock.KindStarlark, Code: benchLoop}
	b.Run("warm", func(b *testing.B) {
		_, prog, err := sl.SourceProgramOptions(rawOptions, "job.star", benchLoop, sl.StringDict{}.Has)
		if err != nil {
			b.Fatal(err)
		}
		pairbench.Run(b, 16, func() error {
			g, err := prog.Init(&sl.Thread{}, nil)
			g.Freeze() // as ExecFileOptions does
			return err
		}, func() error {
			_, err := tier.Run(ctx, j)
			return err
		})
	})
	b.Run("cold", func(b *testing.B) {
		pairbench.Run(b, 4, func() error {
			_, err := sl.ExecFileOptions(rawOptions, &sl.Thread{}, "job.star", benchLoop, nil)
			return err
		}, func() error {
			_, err := cold.Run(ctx, j)
			return err
		})
	})
}
