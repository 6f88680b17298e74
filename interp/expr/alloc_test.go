//go:build !race

// The race detector makes sync.Pool drop a share of what is put in it on
// purpose, so under -race a warm run allocates by design: this file is
// built only without it (make test runs it in its plain pass).

package expr_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/escalate"
	"github.com/airlock-sandbox/airlock/interp/expr"
)

// TestWarmRunDoesNotAllocate: a cached expression over input, through the
// router and the tier to a Result, allocates nothing (the warm path's
// budget is a few hundred nanoseconds; an allocation is a good share of it).
func TestWarmRunDoesNotAllocate(t *testing.T) {
	r, err := escalate.New(escalate.DefaultPolicy(), []airlock.Tier{expr.New()})
	require.NoError(t, err)
	j := job("x * 2 + 1", map[string]any{"x": int64(21)})
	ctx := context.Background()
	run := func() {
		res, err := r.Run(ctx, j)
		if err != nil || res.Value != int64(43) {
			t.Fatalf("got %v, %v", res.Value, err)
		}
	}
	run()
	assert.Zero(t, testing.AllocsPerRun(1000, run))
}
