package expr_test

import (
	"context"
	"errors"
	"math"
	"math/big"
	"strings"
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
		// Arithmetic on literals of the wrong type is refused when
		// compiling, though the operators are rewritten to checked calls.
		{`-"a"`, airlock.ErrCompile},
		{`sum({"a": 1})`, airlock.ErrCompile},
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

// TestIntegerOverflow: every way an expression makes an integer (the
// operators, literals folded while compiling, sum, int() and abs of
// floats or the smallest integer, durations) either gives the exact result
// or fails with a one-line runtime error; expr's VM would wrap. Input
// numbers arrive as int64 (JSON integers) or float64.
func TestIntegerOverflow(t *testing.T) {
	in := map[string]any{
		"top": int64(math.MaxInt64), "bot": int64(math.MinInt64), "big": int64(3037000500),
		"f": 1e300, "nan": 0.0, "items": []any{int64(math.MaxInt64), int64(1)},
		"n": int64(2), "huge": new(big.Int).Lsh(big.NewInt(1), 70),
	}
	tier := expr.New()
	for _, code := range []string{
		"top + 1", "1 + top", "top + top", "bot - 1", "0 - bot", "top * 2", "big * big", "bot * -1", "-1 * bot",
		"-bot", "abs(bot)", "9223372036854775807 + 1", "-9223372036854775807 - 2", "3037000500 * 3037000500",
		"-(-9223372036854775807 - 1)", "let m = top; m + n", "reduce(1..3, #acc * big, big)",
		"sum(items)", "sum(items, #)", "sum([top, n])", "sum([1, 2], top)", "sum(1..4294967296)",
		"int(f)", "int(-f)", "int(nan / nan)", "int(1.0 / 0)", "int(9.3e18)", "int(-9.3e18)",
		"top + 1 > 0", "map([top], # + 1)", "duration(\"2500000h\") * 1000", "duration(\"2500000h\") + duration(\"2500000h\")",
		"-(duration(\"2500000h\") * -3 - duration(\"2000000h\") * 3)",
		`date("0001-01-01") - date("2999-01-01")`,
		"huge + 1", "1 - huge", "huge * 1.5", "-huge", "int(huge)", "abs(huge)", "sum([huge])",
	} {
		t.Run(code, func(t *testing.T) {
			res, err := tier.Run(context.Background(), job(code, in))
			var ce *airlock.ErrorInfo
			require.ErrorAs(t, err, &ce, "got value %v", res.Value)
			assert.Equal(t, airlock.ErrRuntime, ce.Kind)
			assert.Regexp(t, `^(integer|duration) overflow: |^int: .* is outside the 64-bit integer range`, ce.Message)
			assert.NotContains(t, ce.Message, "\n")
		})
	}
	// At the limits, and the operations that give floats or stay within
	// range, the values are exact.
	for _, c := range []struct {
		code string
		want any
	}{
		{"top - 1 + 1", int64(math.MaxInt64)},
		{"-top - 1", int64(math.MinInt64)},
		{"-9223372036854775807 - 1", int64(math.MinInt64)},
		{"bot + top", int64(-1)},
		{"bot % -1", int64(0)},
		{"abs(bot + 1)", int64(math.MaxInt64)},
		{"sum(items, # - 1)", int64(math.MaxInt64 - 1)},
		{"sum([top - 5, 5])", int64(math.MaxInt64)},
		{"sum(1..100)", int64(5050)},
		{"sum(-4294967296..4294967295)", int64(-4294967296)},
		{"int(-9.2e18)", int64(-9200000000000000000)},
		{"int(2.9)", int64(2)},
		{"top * 1.0", float64(math.MaxInt64)},
		{"top / 1", float64(math.MaxInt64)},
		{"top ** 2", math.Pow(math.MaxInt64, 2)},
		{"big * 1.0 * big", 3037000500.0 * 3037000500.0},
		{"string(duration(\"1h\") * 2)", "2h0m0s"},
		{"string(-duration(\"1h\"))", "-1h0m0s"},
		{"len(1..n)", int64(2)},
		{"-n", int64(-2)},
		{"1.5 + 2", 3.5},
	} {
		res, err := tier.Run(context.Background(), job(c.code, in))
		require.NoError(t, err, c.code)
		assert.Equal(t, c.want, res.Value, c.code)
	}
}

// TestNonFiniteResults: JSON has no NaN or infinities, so a result that
// is one (or holds one) is a runtime error naming it; within the
// expression floats follow IEEE arithmetic.
func TestNonFiniteResults(t *testing.T) {
	tier := expr.New()
	for _, code := range []string{"1 / 0", "-1 / 0", "0.0 / 0.0", "[1, 1e308 * 10]", `{"a": 1e308 + 1e308}`, "top ** 2"} {
		_, err := tier.Run(context.Background(), job(code, map[string]any{"top": 1e300}))
		var ce *airlock.ErrorInfo
		require.ErrorAs(t, err, &ce, code)
		assert.Equal(t, airlock.ErrRuntime, ce.Kind, code)
		assert.Contains(t, ce.Message, "cannot be represented in JSON", code)
		// with what usually makes one
		assert.True(t, strings.Contains(ce.Message, "division by zero") || strings.Contains(ce.Message, "undefined operation"), ce.Message)
	}
	res, err := tier.Run(context.Background(), job("1 / 0 > 1e308", nil))
	require.NoError(t, err)
	assert.Equal(t, true, res.Value)
}
