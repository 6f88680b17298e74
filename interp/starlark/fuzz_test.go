package starlark_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/airlock-sandbox/airlock"
)

// FuzzStarlark runs arbitrary scripts under tight limits. Whatever the
// script, the run must end with a result or one of airlock's typed errors,
// never a panic or an internal error, and the value must encode as JSON.
// The seed corpus is in testdata/fuzz/FuzzStarlark.
func FuzzStarlark(f *testing.F) {
	for _, seed := range []string{
		"result = sum([i*i for i in range(4)])",
		"x = [0] * ((1 << 30) - 1)",
		`s = "x"` + "\nfor i in range(64):\n    s += s",
		"l = []\nfor i in range(2000):\n    l = [l]\nresult = str(l)",
		`result = json.decode(json.encode({"a": [1, 2.5, None]}))`,
		`result = ("%s" * 8) % tuple(range(8))`,
		"def f(n):\n    return f(n)\nf(1)",
		`load("x.star", "y")`,
	} {
		f.Add(seed)
	}
	tier := newTier(f)
	f.Fuzz(func(t *testing.T, code string) {
		j := airlock.Job{Kind: airlock.KindStarlark, Code: code,
			Limits: airlock.Limits{WallMS: 200, Steps: 200_000, MemoryMB: 16, OutputBytes: 4096}}
		res, err := tier.Run(context.Background(), j)
		if err != nil {
			if airlock.KindOf(err) == airlock.ErrInternal {
				if _, stopped := airlock.AsStop(err); !stopped {
					t.Fatalf("internal error for %q: %v", code, err)
				}
			}
			var inv *airlock.InvalidJob
			if res.Error == nil && res.Stopped == nil && !errors.As(err, &inv) {
				t.Fatalf("error not recorded in the result: %v", err)
			}
			return
		}
		if _, err := json.Marshal(res.Value); err != nil {
			t.Fatalf("value of %q does not encode: %v", code, err)
		}
		if len(res.Stdout) > 4096 {
			t.Fatalf("stdout of %d bytes over the 4096 cap", len(res.Stdout))
		}
	})
}
