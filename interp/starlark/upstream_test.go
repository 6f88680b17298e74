package starlark_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	libjson "go.starlark.net/lib/json"
	libmath "go.starlark.net/lib/math"
	libtime "go.starlark.net/lib/time"
	sl "go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"
	"go.starlark.net/starlarktest"
	"go.starlark.net/syntax"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
	"github.com/airlock-sandbox/airlock/interp/starlark"
)

// upstreamDiff is a chunk of upstream's test data whose outcome through the
// tier is known to differ from upstream's, and why. docs/starlark.md
// describes each deliberate one.
type upstreamDiff struct {
	file   string // in starlark/testdata
	chunk  int    // index of the chunk in the file, from 0
	first  string // the chunk's first non-blank line, to catch a shifted index
	reason string
}

var knownStarlarkDiffs = []upstreamDiff{
	{"benchmark.star", 0, "# Benchmarks of Starlark execution", "the tier predeclares json, math, time and random; upstream's run, without them, fails to compile the chunk"},
	{"json.star", 1, "", "an empty chunk: the tier refuses a job with no code"},
	{"time.star", 0, "# Tests of time module.", "the tier offers only UTC: other zones would read the host's zoneinfo files"},
}

// moduleDir returns the directory of module path in the module cache, as
// go list reports it for the version in go.mod.
func moduleDir(t *testing.T, path string) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-json", path).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%v: %s", err, strings.TrimSpace(string(ee.Stderr)))
		}
		testenv.Skipf(t, "go list -m %s: %v", path, err)
	}
	var m struct{ Dir string }
	if err := json.Unmarshal(out, &m); err != nil || m.Dir == "" {
		testenv.Skipf(t, "module %s is not in the module cache (go mod download %s)", path, path)
	}
	return m.Dir
}

// upstreamChunk is one chunk of a chunked test file: the source padded
// with newlines so that line numbers are the file's, and the expected
// errors by line.
type upstreamChunk struct {
	src   string
	first string
	want  map[int]*regexp.Regexp
}

// readChunks splits a file as go.starlark.net's internal/chunkedfile does.
func readChunks(t *testing.T, file string) []upstreamChunk {
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var chunks []upstreamChunk
	line := 1
	for _, text := range strings.Split(string(data), "\n---\n") {
		c := upstreamChunk{src: strings.Repeat("\n", line-1) + text, want: map[int]*regexp.Regexp{}}
		for _, l := range strings.Split(text, "\n") {
			if c.first == "" && strings.TrimSpace(l) != "" {
				c.first = strings.TrimSpace(l)
			}
			if _, after, ok := strings.Cut(l, "###"); ok {
				pattern, err := strconv.Unquote(strings.TrimSpace(after))
				if err != nil {
					t.Fatalf("%s:%d: not a quoted regexp: %s", file, line, after)
				}
				c.want[line] = regexp.MustCompile(pattern)
			}
			line++
		}
		chunks = append(chunks, c)
	}
	return chunks
}

// reporter collects assert module failures (starlarktest.Reporter).
type reporter struct{ errs []string }

func (r *reporter) Error(args ...any) { r.errs = append(r.errs, fmt.Sprint(args...)) }

// chunkOutcome is what running a chunk came to: the problems the chunked
// test runner would report, by line and kind (message text is kept apart,
// for diagnosis, because the tier names rewritten operators differently).
type chunkOutcome struct {
	problems []string
	detail   []string
}

func (o chunkOutcome) String() string {
	if len(o.problems) == 0 {
		return "pass"
	}
	return strings.Join(o.problems, "; ")
}

var toplevelLine = regexp.MustCompile(`job\.star:(\d+):\d+: in <toplevel>`)

// judge turns a run's assertion failures and final error into an outcome.
func judge(c upstreamChunk, asserts []string, err error) chunkOutcome {
	var o chunkOutcome
	want := make(map[int]*regexp.Regexp, len(c.want))
	for k, v := range c.want {
		want[k] = v
	}
	for _, a := range asserts {
		line := "?"
		if m := toplevelLine.FindStringSubmatch(a); m != nil {
			line = m[1]
		}
		o.problems = append(o.problems, "line "+line+": assertion failed")
		o.detail = append(o.detail, a)
	}
	var (
		invalid *airlock.InvalidJob
		ee      *sl.EvalError
		ce      *airlock.ErrorInfo
		stopped *airlock.Stop
	)
	backtrace := ""
	switch {
	case err == nil:
	case errors.As(err, &invalid):
		o.problems = append(o.problems, "invalid job")
		o.detail = append(o.detail, err.Error())
	case errors.As(err, &ee):
		backtrace = ee.Backtrace()
	case errors.As(err, &ce) && ce.Kind == airlock.ErrRuntime:
		backtrace = ce.Message
	case errors.As(err, &stopped):
		o.problems = append(o.problems, "stopped: "+string(stopped.Reason))
		o.detail = append(o.detail, err.Error())
	default:
		o.problems = append(o.problems, "compile error")
		o.detail = append(o.detail, err.Error())
	}
	if backtrace != "" {
		line, msg := 0, backtrace
		if m := toplevelLine.FindStringSubmatch(backtrace); m != nil {
			line, _ = strconv.Atoi(m[1])
		}
		lines := strings.Split(backtrace, "\n")
		for i, l := range lines {
			if i > 0 && strings.HasPrefix(l, "Error") {
				_, msg, _ = strings.Cut(strings.Join(lines[i:], "\n"), ": ")
				break
			}
		}
		rx, ok := want[line]
		delete(want, line)
		switch {
		case !ok:
			o.problems = append(o.problems, fmt.Sprintf("line %d: unexpected error", line))
		case !rx.MatchString(msg):
			o.problems = append(o.problems, fmt.Sprintf("line %d: error does not match ###", line))
		}
		o.detail = append(o.detail, backtrace)
	}
	for line := range want {
		o.problems = append(o.problems, fmt.Sprintf("line %d: expected error did not occur", line))
	}
	sort.Strings(o.problems)
	return o
}

// The test harness built-ins upstream's own test predeclares (eval_test.go),
// given to both runs.
type fib struct{}

func (fib) Freeze()               {}
func (fib) String() string        { return "fib" }
func (fib) Type() string          { return "fib" }
func (fib) Truth() sl.Bool        { return true }
func (fib) Hash() (uint32, error) { return 0, fmt.Errorf("fib is unhashable") }
func (fib) Iterate() sl.Iterator  { return &fibIterator{0, 1} }

type fibIterator struct{ x, y int }

func (it *fibIterator) Next(p *sl.Value) bool {
	*p = sl.MakeInt(it.x)
	it.x, it.y = it.y, it.x+it.y
	return true
}
func (it *fibIterator) Done() {}

type hasfields struct {
	attrs  sl.StringDict
	frozen bool
}

func newHasFields(_ *sl.Thread, b *sl.Builtin, args sl.Tuple, kwargs []sl.Tuple) (sl.Value, error) {
	if len(args)+len(kwargs) > 0 {
		return nil, fmt.Errorf("%s: unexpected arguments", b.Name())
	}
	return &hasfields{attrs: sl.StringDict{}}, nil
}

func (hf *hasfields) String() string        { return "hasfields" }
func (hf *hasfields) Type() string          { return "hasfields" }
func (hf *hasfields) Truth() sl.Bool        { return true }
func (hf *hasfields) Hash() (uint32, error) { return 42, nil }
func (hf *hasfields) Freeze() {
	if !hf.frozen {
		hf.frozen = true
		for _, v := range hf.attrs {
			v.Freeze()
		}
	}
}
func (hf *hasfields) Attr(name string) (sl.Value, error) { return hf.attrs[name], nil }
func (hf *hasfields) SetField(name string, val sl.Value) error {
	if hf.frozen {
		return fmt.Errorf("cannot set field on a frozen hasfields")
	}
	if strings.HasPrefix(name, "no") {
		return sl.NoSuchAttrError(fmt.Sprintf("no .%s field", name))
	}
	hf.attrs[name] = val
	return nil
}
func (hf *hasfields) AttrNames() []string {
	return slices.Sorted(func(yield func(string) bool) {
		for k := range hf.attrs {
			if !yield(k) {
				return
			}
		}
	})
}
func (hf *hasfields) Binary(op syntax.Token, y sl.Value, side sl.Side) (sl.Value, error) {
	if op == syntax.PLUS {
		if _, ok := y.(*sl.List); ok {
			return sl.MakeInt(42), nil
		}
	}
	return nil, nil
}

func harnessBuiltins() sl.StringDict {
	return sl.StringDict{
		"hasfields": sl.NewBuiltin("hasfields", newHasFields),
		"fibonacci": fib{},
		"struct":    sl.NewBuiltin("struct", starlarkstruct.Make),
	}
}

// TestUpstreamStarlark runs every chunk of go.starlark.net's own test data,
// with its assert module, through the tier and through upstream with the
// tier's dialect, and requires the same outcome except for the chunks in
// knownStarlarkDiffs, each of which must still differ. The proto module
// (proto.star) needs a descriptor pool that neither run is given.
func TestUpstreamStarlark(t *testing.T) {
	dir := filepath.Join(moduleDir(t, "go.starlark.net"), "starlark", "testdata")
	files, err := filepath.Glob(filepath.Join(dir, "*.star"))
	if err != nil || len(files) == 0 {
		testenv.Skipf(t, "no upstream test data in %s: %v", dir, err)
	}
	assertMod, err := starlarktest.LoadAssertModule()
	if err != nil {
		t.Fatal(err)
	}
	tierMods := starlark.Modules()
	var cur *reporter
	mods := map[string]sl.StringDict{
		"assert.star": assertMod,
		"json.star":   {"json": tierMods["json"]},
		"math.star":   {"math": tierMods["math"]},
		"time.star":   {"time": tierMods["time"]},
	}
	generous := airlock.Limits{WallMS: 60_000, MemoryMB: 4096, Steps: 1_000_000_000, OutputBytes: 16 << 20}
	policy := airlock.LimitPolicy{Default: generous, Max: generous}
	tier, err := starlark.NewHarnessTier(starlark.NewConfig().WithLimits(policy), harnessBuiltins(), mods,
		func(th *sl.Thread) { starlarktest.SetReporter(th, cur) })
	if err != nil {
		t.Fatal(err)
	}
	upstreamMods := map[string]sl.StringDict{
		"assert.star": assertMod,
		"json.star":   {"json": libjson.Module},
		"math.star":   {"math": libmath.Module},
		"time.star":   {"time": libtime.Module},
	}

	known := map[string]upstreamDiff{}
	for _, d := range knownStarlarkDiffs {
		known[fmt.Sprintf("%s#%d", d.file, d.chunk)] = d
	}
	seen := map[string]bool{}
	total, same := 0, 0
	for _, file := range files {
		base := filepath.Base(file)
		for i, c := range readChunks(t, file) {
			key := fmt.Sprintf("%s#%d", base, i)
			seen[key] = true
			total++
			t.Run(key, func(t *testing.T) {
				up := &reporter{}
				th := &sl.Thread{Name: "upstream", Print: func(*sl.Thread, string) {}}
				th.Load = func(_ *sl.Thread, module string) (sl.StringDict, error) {
					if m, ok := upstreamMods[module]; ok {
						return m, nil
					}
					return nil, fmt.Errorf("no module %q", module)
				}
				starlarktest.SetReporter(th, up)
				_, err := sl.ExecFileOptions(starlark.FileOptions, th, "job.star", c.src, harnessBuiltins())
				want := judge(c, up.errs, err)

				cur = &reporter{}
				_, err = tier.Run(context.Background(), airlock.Job{Kind: airlock.KindStarlark, Code: c.src, Limits: generous})
				got := judge(c, cur.errs, err)

				differs := got.String() != want.String()
				d, listed := known[key]
				switch {
				case listed && d.first != c.first:
					t.Errorf("listed difference %s starts %q, but the chunk now starts %q", key, d.first, c.first)
				case differs && !listed:
					t.Errorf("%s (%s): tier %s, upstream %s\ntier:\n%s\nupstream:\n%s", key, c.first, got, want,
						strings.Join(got.detail, "\n"), strings.Join(want.detail, "\n"))
				case !differs && listed:
					t.Errorf("%s is listed as differing (%s) but the tier now agrees with upstream (%s): remove it from knownStarlarkDiffs", key, d.reason, got)
				case differs:
					t.Logf("known difference (%s): tier %s, upstream %s", d.reason, got, want)
				default:
					same++
				}
			})
		}
	}
	for key := range known {
		if !seen[key] {
			t.Errorf("listed difference %s names no chunk of upstream's test data", key)
		}
	}
	t.Logf("%d of %d chunks agree with upstream; %d listed differences", same, total, len(known))
}
