package expr_test

import (
	"context"
	"testing"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/interp/expr"
)

// FuzzExpr: no expression crashes the process or escapes the typed errors.
func FuzzExpr(f *testing.F) {
	for _, s := range []string{
		"1 + 2", "x * 2", `repeat("ab", 3)`, `map(1..10, # * #)`, `reduce(1..5, #acc + #, 0)`,
		`let a = [1, 2]; a[1:]`, `{"a": x}.a`, `now()`, `toJSON({"a": [1]})`, `"a" matches "^a$"`,
		`replace(replace("x", "x", "xx"), "x", "xx")`, `(((((1)))))`, `!!!true`, `x ?? 1`,
	} {
		f.Add(s)
	}
	tier := expr.New()
	f.Fuzz(func(t *testing.T, code string) {
		job := airlock.Job{Kind: airlock.KindExpr, Code: code, Input: map[string]any{"x": int64(3)},
			Limits: airlock.Limits{WallMS: 200, MemoryMB: 16, Steps: 100_000}}
		res, err := tier.Run(context.Background(), job)
		if err == nil {
			return
		}
		if _, ok := airlock.AsStop(err); ok {
			return
		}
		switch airlock.KindOf(err) {
		case airlock.ErrInvalid, airlock.ErrCompile, airlock.ErrRuntime:
		default:
			t.Fatalf("untyped error for %q: %T %v (result %+v)", code, err, err, res)
		}
	})
}
