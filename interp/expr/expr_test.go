package expr_test

import (
	"context"
	"errors"
	"math"
	"math/big"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/corpus"
	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
	"github.com/airlock-sandbox/airlock/internal/testing/tiertest"
	"github.com/airlock-sandbox/airlock/interp/expr"
)

func job(code string, input map[string]any) airlock.Job {
	return airlock.Job{Kind: airlock.KindExpr, Code: code, Input: input}
}

func TestConformance(t *testing.T) {
	spin := job(`let r = 1..100000; count(r, count(r, count(r, # < 0) == 0) < 0)`, nil)
	flood := job(`map(1..100000, "xxxxxxxxxxxxxxxxxxxx")`, nil)
	tiertest.Suite{
		Tier:  expr.New(),
		OK:    job("x * 2", map[string]any{"x": int64(21)}),
		Check: func(t testing.TB, res airlock.Result) { assert.Equal(t, int64(42), res.Value) },
		Spin:  &spin,
		Flood: &flood,
		// expr has no way to the process environment: the job names the
		// canary variable as an identifier, which must not resolve to it.
		Env:    &airlock.Job{Kind: airlock.KindExpr, Code: tiertest.CanaryEnv},
		Broken: &airlock.Job{Kind: airlock.KindExpr, Code: "1 +"},
	}.Run(t)
}

// TestCorpus runs every expr case in this process: the process surviving
// the crashers is itself the check.
func TestCorpus(t *testing.T) {
	cases, err := corpus.Load("expr")
	require.NoError(t, err)
	require.NotEmpty(t, cases)
	tier := expr.New()
	for _, c := range cases {
		t.Run(c.ID, func(t *testing.T) {
			if why := c.SkipReason(nil); why != "" {
				testenv.Skipf(t, "%s", why)
			}
			v := c.Run(context.Background(), tier, nil)
			if !v.Pass {
				t.Fatalf("%s: %s", c.ID, v.Detail)
			}
		})
	}
}

func TestValuesCrossFaithfully(t *testing.T) {
	tier := expr.New()
	big, _ := new(big.Int).SetString("123456789012345678901234567890", 10)
	res, err := tier.Run(context.Background(), job("x", map[string]any{"x": big}))
	require.NoError(t, err)
	assert.Equal(t, big.String(), res.Value.(interface{ String() string }).String())

	res, err = tier.Run(context.Background(), job(`{"a": [1, 2.5, "s", true, nil]}`, nil))
	require.NoError(t, err)
	assert.Equal(t, map[string]any{"a": []any{int64(1), 2.5, "s", true, nil}}, res.Value)

	_, err = tier.Run(context.Background(), job("0.0 / 0.0", nil))
	var ce *airlock.ErrorInfo
	require.ErrorAs(t, err, &ce)
	assert.Contains(t, ce.Message, "cannot be represented")
}

func TestErrorsAreTyped(t *testing.T) {
	tier := expr.New()
	cases := []struct {
		code string
		want airlock.ErrorKind
	}{
		{"1 +", airlock.ErrCompile},
		{"now().Unix()", airlock.ErrCompile},
		{"missing * 2", airlock.ErrRuntime},
		{`"a" * 2`, airlock.ErrCompile},
		{`int("x")`, airlock.ErrRuntime},
	}
	for _, c := range cases {
		res, err := tier.Run(context.Background(), job(c.code, nil))
		require.Error(t, err, c.code)
		assert.Equal(t, c.want, airlock.KindOf(err), "%s: %v", c.code, err)
		require.NotNil(t, res.Error, c.code)
		assert.Equal(t, c.want, res.Error.Kind)
		assert.NotContains(t, res.Error.Message, "\n", "messages are one line")
	}
}

func TestNowIsPinned(t *testing.T) {
	tier := expr.New()
	clock := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	j := job("now()", nil)
	j.Clock = clock
	for range 2 {
		res, err := tier.Run(context.Background(), j)
		require.NoError(t, err)
		assert.Equal(t, "2030-01-02T03:04:05Z", res.Value)
		assert.True(t, res.Clock.Equal(clock))
	}
}

func TestReservedInputNames(t *testing.T) {
	_, err := expr.New().Run(context.Background(), job("1", map[string]any{"__s": 1}))
	var inv *airlock.InvalidJob
	require.True(t, errors.As(err, &inv), "got %v", err)
}

// TestInputChecks covers both ways the tier checks its input (lookups
// when the input holds just the program's variables, one pass over it
// otherwise): a value that is not JSON-compatible is invalid, the reserved
// name is refused, and a variable missing from the input is a runtime error.
func TestInputChecks(t *testing.T) {
	fn := func() {}
	for _, c := range []struct {
		name, code string
		input      map[string]any
		want       any // *airlock.InvalidJob, *airlock.ErrorInfo, or the value
	}{
		{"exact", "x + y", map[string]any{"x": 1, "y": 2}, int64(3)},
		{"extra", "x + 1", map[string]any{"x": 1, "unused": "a"}, int64(2)},
		{"bad value, exact", "x", map[string]any{"x": fn}, &airlock.InvalidJob{}},
		{"bad value, extra", "x", map[string]any{"x": 1, "y": math.NaN()}, &airlock.InvalidJob{}},
		{"bad nested value", "x", map[string]any{"x": []any{map[string]any{"f": fn}}}, &airlock.InvalidJob{}},
		{"reserved, extra", "x", map[string]any{"x": 1, "__s": 1}, &airlock.InvalidJob{}},
		{"missing, same count", "x", map[string]any{"y": 1}, &airlock.ErrorInfo{}},
		{"missing, more keys", "x + z", map[string]any{"y": 1, "w": 2, "x": 3}, &airlock.ErrorInfo{}},
		{"missing, no input", "x", nil, &airlock.ErrorInfo{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			res, err := expr.New().Run(context.Background(), job(c.code, c.input))
			switch want := c.want.(type) {
			case *airlock.InvalidJob:
				var inv *airlock.InvalidJob
				require.ErrorAs(t, err, &inv)
				assert.Equal(t, "input", inv.Field)
			case *airlock.ErrorInfo:
				var ce *airlock.ErrorInfo
				require.ErrorAs(t, err, &ce)
				assert.Equal(t, airlock.ErrRuntime, ce.Kind)
				assert.Contains(t, ce.Message, "not in input")
			default:
				require.NoError(t, err)
				assert.Equal(t, want, res.Value)
			}
		})
	}
}

func TestAdmit(t *testing.T) {
	tier := expr.New()
	j := job("1", nil)
	require.NoError(t, tier.Admit(j))
	j.Grants.Spawn = true
	var na *airlock.NotAdmitted
	require.ErrorAs(t, tier.Admit(j), &na)
	j = airlock.Job{Kind: airlock.KindStarlark, Code: "x = 1"}
	require.ErrorAs(t, tier.Admit(j), &na)
}

func TestCacheIsBounded(t *testing.T) {
	tier := expr.NewWithConfig(expr.NewConfig().WithCacheSize(4))
	for i := range 50 {
		res, err := tier.Run(context.Background(), job("1 + "+string(rune('0'+i%10)), nil))
		require.NoError(t, err)
		assert.Equal(t, int64(1+i%10), res.Value)
	}
}
