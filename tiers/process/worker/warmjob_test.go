package worker_test

import (
	"context"
	"testing"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/tiers/process/worker/exprworker"
	"github.com/airlock-sandbox/airlock/tiers/process/worker/starlarkworker"
)

// TestWarmJob runs each worker's warm-up job in-process: a worker ignores
// its errors, so a warm-up that stopped compiling would silently warm
// nothing.
func TestWarmJob(t *testing.T) {
	for name, w := range map[string]struct {
		job  string
		tier func() airlock.Tier
	}{
		"expr":     {exprworker.WarmJob, exprworker.New},
		"starlark": {starlarkworker.WarmJob, starlarkworker.New},
	} {
		t.Run(name, func(t *testing.T) {
			job, err := airlock.DecodeJob([]byte(w.job))
			if err != nil {
				t.Fatal(err)
			}
			if job.Clock.IsZero() || job.Seed == 0 {
				t.Fatal("the warm-up job must pin a clock and seed, as every job the host sends does (their decoding is otherwise cold at the claim)")
			}
			res, err := w.tier().Run(context.Background(), job)
			if err != nil {
				t.Fatalf("warm-up job failed: %v", err)
			}
			if res.Value == nil {
				t.Fatalf("warm-up job gave no value: %+v", res)
			}
		})
	}
}
