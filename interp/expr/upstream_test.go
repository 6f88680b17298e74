package expr_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	exprlang "github.com/expr-lang/expr"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
	"github.com/airlock-sandbox/airlock/internal/value"
	"github.com/airlock-sandbox/airlock/interp/expr"
)

// exprDiff explains expressions of upstream's test data whose outcome
// through the tier is known to differ from expr's own, and why;
// docs/expr.md describes each. An entry matches when each of its
// non-empty regular expressions matches: over the expression, over the
// tier's error and over expr's error. A difference is explained by the
// first entry that matches it.
type exprDiff struct {
	expr, tier, upstream string
	reason               string
}

var knownExprDiffs = []exprDiff{
	{expr: `\$env`, reason: "$env is reserved: an expression reads its input variables by name only"},
	{tier: `method calls are not allowed`, reason: "method calls are refused"},
	{expr: `findLast`, tier: `"findLast(Index)?" is not available`, reason: "findLast and findLastIndex are refused: expr's backward loop leaks the VM stack"},
	{tier: `date\(\) with a time zone is not available`, reason: "date() takes no time zone: times are UTC"},
	{tier: `is outside the 64-bit integer range`, reason: "an integer result beyond 64 bits, or int() of NaN, an infinity or a float beyond that range, is an error: expr wraps or returns an unspecified value"},
	{expr: `^sum\(\[`, tier: `invalid operation: string \+ int`, reason: "sum adds numbers only: expr's optimizer turns the sum of a literal array into a + b, which concatenates strings, while its sum of any other array of strings fails"},
	{upstream: `mismatched types`, reason: "variables are untyped: expr, compiling against the typed input, refuses operations on mismatched types that the tier evaluates"},
}

// exprEnv is upstream's generated-test environment (test/gen/env.go) as
// job input can carry it: JSON values, with the struct Foo as an object
// and without the functions add and greet.
func exprEnv() map[string]any {
	return map[string]any{
		"ok":    true,
		"i":     int64(1),
		"str":   "str",
		"f64":   0.5,
		"array": []any{int64(1), int64(2), int64(3), int64(4), int64(5)},
		"foo":   map[string]any{"Bar": "foo"},
		"list":  []any{map[string]any{"Bar": "bar"}, map[string]any{"Bar": "baz"}},
	}
}

var mapOrder = regexp.MustCompile(`\b(keys|values|toPairs)\(`)

// exprOutcome is how an expression came out: its value as JSON, or that
// it failed (compile or run time alike: the tier checks types at run time
// where expr, given a typed environment, checks them while compiling).
func exprOutcome(v any, err error, unordered bool) (outcome, detail string) {
	var ce *airlock.ErrorInfo
	if errors.As(err, &ce) && strings.Contains(ce.Message, "cannot be represented in JSON") {
		return "unexportable", err.Error() // the tier reports what ExportValue reports below
	}
	if err != nil {
		return "error", err.Error()
	}
	x, err := value.Export(v)
	if err != nil {
		return "unexportable", err.Error()
	}
	if a, ok := x.([]any); ok && unordered {
		// keys, values and toPairs follow Go's map order, which varies.
		sort.Slice(a, func(i, j int) bool { return fmt.Sprint(a[i]) < fmt.Sprint(a[j]) })
	}
	b, err := json.Marshal(x)
	if err != nil {
		return "unexportable", err.Error()
	}
	return "value " + string(b), ""
}

// TestUpstreamExpr runs every expression of expr-lang/expr's generated
// test data (testdata/generated.txt, from the module cache) through the
// tier and through expr itself with the same environment, and requires
// the same outcome except where knownExprDiffs explains the difference;
// an entry that explains none fails too.
func TestUpstreamExpr(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-json", "github.com/expr-lang/expr").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%v: %s", err, strings.TrimSpace(string(ee.Stderr)))
		}
		testenv.Skipf(t, "go list -m github.com/expr-lang/expr: %v", err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		testenv.Skipf(t, "github.com/expr-lang/expr is not in the module cache (go mod download)")
	}
	data, err := os.ReadFile(filepath.Join(mod.Dir, "testdata", "generated.txt"))
	if err != nil {
		testenv.Skipf(t, "upstream test data: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")

	compile := func(p string) *regexp.Regexp {
		if p == "" {
			return nil
		}
		return regexp.MustCompile(p)
	}
	known := make([][3]*regexp.Regexp, len(knownExprDiffs))
	for i, d := range knownExprDiffs {
		known[i] = [3]*regexp.Regexp{compile(d.expr), compile(d.tier), compile(d.upstream)}
	}
	matches := func(k [3]*regexp.Regexp, texts ...string) bool {
		for j, rx := range k {
			if rx != nil && !rx.MatchString(texts[j]) {
				return false
			}
		}
		return true
	}
	explained := make([]int, len(knownExprDiffs))
	example := make([]string, len(knownExprDiffs))

	generous := airlock.Limits{WallMS: 10_000, MemoryMB: 1024, Steps: 100_000_000, OutputBytes: 1 << 20}
	tier := expr.NewWithConfig(expr.NewConfig().WithLimits(airlock.LimitPolicy{Default: generous, Max: generous}))
	clock := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	env := exprEnv()
	ctx := context.Background()
	start := time.Now()
	same, unexplained := 0, 0
	for _, line := range lines {
		prog, err := exprlang.Compile(line, exprlang.Env(env))
		var v any
		if err == nil {
			v, err = exprlang.Run(prog, env)
		}
		unordered := mapOrder.MatchString(line)
		want, wantDetail := exprOutcome(v, err, unordered)

		res, err := tier.Run(ctx, airlock.Job{Kind: airlock.KindExpr, Code: line, Input: env, Clock: clock, Limits: generous})
		got, gotDetail := exprOutcome(res.Value, err, unordered)
		var ce *airlock.ErrorInfo
		if err != nil && !errors.As(err, &ce) {
			got = "refused" // stopped, invalid or not admitted, not the expression's own error
		}
		if got == want {
			same++
			continue
		}
		i := 0
		for i < len(known) && !matches(known[i], line, gotDetail, wantDetail) {
			i++
		}
		if i < len(known) {
			if explained[i]++; example[i] == "" {
				example[i] = fmt.Sprintf("%s: tier %s, expr %s", line, got, want)
			}
			continue
		}
		if unexplained++; unexplained <= 20 {
			t.Errorf("%q: tier %s (%s), expr %s (%s)", line, got, gotDetail, want, wantDetail)
		}
	}
	if unexplained > 20 {
		t.Errorf("... and %d more differences that no entry of knownExprDiffs explains", unexplained-20)
	}
	for i, d := range knownExprDiffs {
		if explained[i] == 0 {
			t.Errorf("knownExprDiffs entry %q explains no difference any more: remove it", d.reason)
		} else {
			t.Logf("%d differences: %s (e.g. %s)", explained[i], d.reason, example[i])
		}
	}
	t.Logf("%d of %d expressions agree with expr in %v", same, len(lines), time.Since(start).Round(time.Millisecond))
}
