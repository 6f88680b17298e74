package expr_test

import (
	"context"
	"errors"
	"runtime"
	"testing"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/interp/expr"
)

// TestSplitChargedBeforeAllocating: splitting a string into its
// characters makes a 16-byte string of every byte; split and splitAfter
// charge that before they allocate, so a split the budget cannot afford
// stops without having allocated it (it allocated 128 MB under a 64 MiB
// budget, 16 times the string, when split was charged afterwards).
func TestSplitChargedBeforeAllocating(t *testing.T) {
	tier := expr.New()
	ctx := context.Background()
	for _, code := range []string{
		`len(split(repeat("a", 8000000), ""))`,
		`len(splitAfter(repeat(",", 8000000), ","))`,
		`len(split(repeat("a", 8000000), "", 8000000))`,
	} {
		j := job(code, nil)
		j.Limits.MemoryMB = 64
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := tier.Run(ctx, j)
		runtime.ReadMemStats(&after)
		var st *airlock.Stop
		if !errors.As(err, &st) || st.Reason != airlock.StopMemory {
			t.Errorf("%s: want a memory stop, got %v", code, err)
		}
		if n := after.TotalAlloc - before.TotalAlloc; n > 32<<20 {
			t.Errorf("%s: allocated %d MB under a 64 MiB budget", code, n>>20)
		}
	}
	res, err := tier.Run(ctx, job(`[len(split(repeat("a,", 1000), ",")), splitAfter("a,b", ","), split("a,b,c", ",", 2)]`, nil))
	if err != nil || len(res.Value.([]any)) != 3 || res.Value.([]any)[0] != int64(1001) {
		t.Fatalf("benign splits: %v %v", res.Value, err)
	}
}
