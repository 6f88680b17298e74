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
		memoryStopWithin(t, tier, code)
	}
	res, err := tier.Run(ctx, job(`[len(split(repeat("a,", 1000), ",")), splitAfter("a,b", ","), split("a,b,c", ",", 2)]`, nil))
	if err != nil || len(res.Value.([]any)) != 3 || res.Value.([]any)[0] != int64(1001) {
		t.Fatalf("benign splits: %v %v", res.Value, err)
	}
}

// TestMatchesPatternCharged: a pattern made at run time is compiled at
// run time, for about 230 bytes of the host's per byte of pattern; it is
// charged before it is compiled (a 2 MB pattern allocated 456 MB under a
// 64 MiB budget), once for repeated uses, and an error quotes little of
// it (Go's quoted all 100,000 bytes).
func TestMatchesPatternCharged(t *testing.T) {
	tier := expr.New()
	ctx := context.Background()
	memoryStopWithin(t, tier, `"a" matches repeat("a", 2000000)`)
	_, err := tier.Run(ctx, job(`"a" matches repeat("(", 100000)`, nil))
	if airlock.KindOf(err) != airlock.ErrRuntime || len(err.Error()) > 200 {
		t.Errorf("an invalid long pattern: want a short runtime error, got %d bytes: %.300v", len(err.Error()), err)
	}
	// The same pattern a thousand times is charged once (1.6 MB).
	res, err := tier.Run(ctx, job(`let p = repeat("a", 10000); count(1..1000, "b" + string(#) matches p)`, nil))
	if err != nil || res.Value != int64(0) {
		t.Fatalf("a pattern reused: %v %v", res.Value, err)
	}
}

// memoryStopWithin runs code under a 64 MiB budget: it must stop on
// memory, having allocated at most half the budget (charged before it
// allocates, not after).
func memoryStopWithin(t *testing.T, tier airlock.Tier, code string) {
	t.Helper()
	j := job(code, nil)
	j.Limits.MemoryMB = 64
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := tier.Run(context.Background(), j)
	runtime.ReadMemStats(&after)
	var st *airlock.Stop
	if !errors.As(err, &st) || st.Reason != airlock.StopMemory {
		t.Errorf("%s: want a memory stop, got %v", code, err)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 32<<20 {
		t.Errorf("%s: allocated %d MB under a 64 MiB budget", code, n>>20)
	}
}
