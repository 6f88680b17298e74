package starlark_test

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/testing/tiertest"
	"github.com/airlock-sandbox/airlock/interp/starlark"
)

func newTier(t testing.TB) *starlark.Tier {
	t.Helper()
	tier, err := starlark.New(starlark.NewConfig())
	require.NoError(t, err)
	return tier
}

func job(code string) airlock.Job { return airlock.Job{Kind: airlock.KindStarlark, Code: code} }

func ptr(j airlock.Job) *airlock.Job { return &j }

func TestConformance(t *testing.T) {
	// The suite's own leak check runs in a subtest goroutine and counts
	// it; check from this goroutine instead.
	before := runtime.NumGoroutine()
	defer tiertest.NoGoroutineLeak(t, before)
	tiertest.Suite{
		Tier: newTier(t),
		OK:   job("result = sum([i*i for i in range(4)])"),
		Check: func(t testing.TB, res airlock.Result) {
			if res.Value != int64(14) {
				t.Errorf("value %#v, want 14", res.Value)
			}
		},
		// Each iteration is one long builtin call, so the wall clock (not
		// the default step budget) ends it, and the builtin must notice.
		Spin:   ptr(job("while True:\n    all(range(1, 1 << 40))")),
		Flood:  ptr(job("while True:\n    print('flood' * 100)")),
		Broken: ptr(job("fail('boom')")),
		// Starlark has no os module and no getenv: the script dumps every
		// member of everything it can reach, and the suite checks that the
		// canary's value is nowhere in it.
		Env: ptr(job(`
seen = [str(input)]
for m in [json, time, math, random]:
    seen.append(str(m))
    for n in dir(m):
        seen.append(n + "=" + str(getattr(m, n)))
result = seen`)),
	}.Run(t)
}

func run(t *testing.T, j airlock.Job) (airlock.Result, error) {
	t.Helper()
	return newTier(t).Run(context.Background(), j)
}

func TestValues(t *testing.T) {
	res, err := run(t, airlock.Job{Kind: airlock.KindStarlark, Code: `
result = {"sum": items[0] % 2 + items[1], "big": 1 << 100, "tuple": (1, "a"), "nested": input["items"], "f": 0.5, "n": None, "ok": True}`,
		Input: map[string]any{"items": []any{int64(3), int64(4)}}})
	require.NoError(t, err)
	want, _ := new(big.Int).SetString("1267650600228229401496703205376", 10)
	v := res.Value.(map[string]any)
	assert.Equal(t, int64(5), v["sum"])
	assert.Equal(t, 0, want.Cmp(v["big"].(*big.Int)))
	assert.Equal(t, []any{int64(1), "a"}, v["tuple"])
	assert.Equal(t, []any{int64(3), int64(4)}, v["nested"])
	assert.Equal(t, 0.5, v["f"])
	assert.Nil(t, v["n"])
	assert.Equal(t, true, v["ok"])
}

func TestBigInput(t *testing.T) {
	job, err := airlock.DecodeJob([]byte(`{"kind":"starlark","code":"result = n + 1","input":{"n":123456789012345678901234567890}}`))
	require.NoError(t, err)
	res, err := run(t, job)
	require.NoError(t, err)
	assert.Equal(t, "123456789012345678901234567891", res.Value.(*big.Int).String())
}

func TestUnrepresentable(t *testing.T) {
	for _, code := range []string{"result = {1: 2}", "def f(): pass\nresult = f", "result = float('nan')", "result = b'x'",
		"result = [1e308 * 10]", "result = {'a': -math.exp(1000)}"} {
		_, err := run(t, job(code))
		var ce *airlock.ErrorInfo
		require.ErrorAs(t, err, &ce, code)
		assert.Equal(t, airlock.ErrRuntime, ce.Kind)
		assert.Contains(t, ce.Message, "result value")
	}
}

// TestNumbers: integers are exact at any size (int() of a float included),
// floats that JSON cannot carry are refused (above), and a duration
// beyond the 64-bit range of nanoseconds made by any operator (or the
// difference of two times that far apart) is an error where the time
// module would wrap around or saturate.
func TestNumbers(t *testing.T) {
	res, err := run(t, job("result = [int(1e19), (1 << 63) - 1 + 1, int(-1e19) * 3]"))
	require.NoError(t, err)
	v := res.Value.([]any)
	assert.Equal(t, "10000000000000000000", v[0].(*big.Int).String())
	assert.Equal(t, "9223372036854775808", v[1].(*big.Int).String())
	assert.Equal(t, "-30000000000000000000", v[2].(*big.Int).String())

	long := `time.parse_duration("2500000h")`
	neg := "(-1 * " + long + ")"
	minD := "(time.nanosecond * (-1 << 62) * 2)" // the most negative duration
	for _, code := range []string{long + " * 1000", "1000 * " + long, long + " + " + long, "[" + long + "][0] * -4",
		// -, /, += and -= (on names, items and fields alike) and the
		// difference of two far-apart times check as + and * do.
		long + " - " + neg, neg + " - " + long, minD + " / -1", long + " / 1e-9", long + " / float('nan')",
		"[(lambda: " + long + ")()][0] - " + neg,
		"[" + long + " for d in [0]][0] - " + neg,
		"time.time(year=2500) - time.time(year=1800)",
		"time.time(year=1800) - time.time(year=2500)",
	} {
		_, err := run(t, job("result = str("+code+")"))
		var ce *airlock.ErrorInfo
		require.ErrorAs(t, err, &ce, code)
		assert.Equal(t, airlock.ErrRuntime, ce.Kind, code)
		assert.Contains(t, ce.Message, "duration overflow", code)
	}
	for _, code := range []string{
		"d = " + long + "\nd += " + long, "d = " + neg + "\nd -= " + long,
		"d = [" + long + "]\nd[0] += " + long, "d = {'k': " + neg + "}\nd['k'] -= " + long,
		"d = " + minD + "\nd /= -1",
		"def f(d):\n    d += " + long + "\n    return d\nf(" + long + ")",
	} {
		_, err := run(t, job(code))
		var ce *airlock.ErrorInfo
		require.ErrorAs(t, err, &ce, code)
		assert.Contains(t, ce.Message, "duration overflow", code)
	}
	// What fits is exact: a time minus the most negative duration, the
	// int quotient 2^63, the extremes' comparisons, durations added to
	// times in place.
	res, err = run(t, job(`t = time.time(year=2000, month=1, day=1)
d = `+minD+`
m = time.nanosecond * ((1 << 62) - 1) * 2 + time.nanosecond
u = t
u += time.hour
u -= 2 * time.hour
result = [str(t - d), d // (time.nanosecond * -1), d < m, m > d, d == d, str(m - time.hour), str(u), str(t - time.time(year=1990, month=1, day=1))]`))
	require.NoError(t, err)
	v = res.Value.([]any)
	assert.Equal(t, "2292-04-10 23:47:16.854775808 +0000 UTC", v[0])
	assert.Equal(t, "9223372036854775808", v[1].(*big.Int).String())
	assert.Equal(t, []any{true, true, true, "2562046h47m16.854775807s"}, v[2:6])
	assert.Equal(t, "1999-12-31 23:00:00 +0000 UTC", v[6])
	assert.Equal(t, "87648h0m0s", v[7])

	// A time's nanoseconds since 1970 are exact beyond int64, where
	// upstream's wrap (years before 1678 or after 2262).
	res, err = run(t, job(`result = [t.unix_nano for t in [time.time(year=2500, month=1, day=1), time.time(year=1600, month=1, day=1), time.from_timestamp(1, 5)]] + [getattr(time.time(year=3000, month=1, day=1), "unix_nano")]`))
	require.NoError(t, err)
	v = res.Value.([]any)
	assert.Equal(t, "16725225600000000000", fmt.Sprint(v[0]))
	assert.Equal(t, "-11676096000000000000", fmt.Sprint(v[1]))
	assert.Equal(t, int64(1000000005), v[2])
	assert.Equal(t, "32503680000000000000", fmt.Sprint(v[3]))

	res, err = run(t, job("result = [str(time.hour * 3 + time.minute), str(-2 * time.hour), str(time.parse_duration(\"1000000h\") * 2 + time.parse_duration(\"500000h\"))]"))
	require.NoError(t, err)
	assert.Equal(t, []any{"3h1m0s", "-2h0m0s", "2500000h0m0s"}, res.Value)
}

func TestEntry(t *testing.T) {
	res, err := run(t, airlock.Job{Kind: airlock.KindStarlark, Entry: "main",
		Code:  "def main(a, b):\n    return a * b",
		Input: map[string]any{"a": int64(6), "b": int64(7)}})
	require.NoError(t, err)
	assert.Equal(t, int64(42), res.Value)

	_, err = run(t, airlock.Job{Kind: airlock.KindStarlark, Entry: "nope", Code: "x = 1"})
	var ce *airlock.ErrorInfo
	require.ErrorAs(t, err, &ce)
	assert.Contains(t, ce.Message, `"nope" is not defined`)
}

func TestErrors(t *testing.T) {
	_, err := run(t, job("x = (1"))
	var ce *airlock.ErrorInfo
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, airlock.ErrCompile, ce.Kind)
	assert.Contains(t, ce.Message, "job.star:1:")

	_, err = run(t, job("y = undefined_name"))
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, airlock.ErrCompile, ce.Kind)
	assert.Contains(t, ce.Message, "undefined")

	res, err := run(t, job("print('before')\nfail('boom', 42)"))
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, airlock.ErrRuntime, ce.Kind)
	assert.Contains(t, ce.Message, "fail: boom 42")
	assert.Contains(t, ce.Message, "job.star:2:")
	assert.Equal(t, "before\n", res.Stdout)
	assert.Equal(t, airlock.ErrRuntime, res.Error.Kind)

	_, err = run(t, job("x = 1 + 'a'"))
	require.ErrorAs(t, err, &ce)
	assert.Contains(t, ce.Message, "unknown binary op: int + string")

	_, err = run(t, job("def f(n):\n    return f(n)\nresult = f(1)"))
	require.ErrorAs(t, err, &ce)
	assert.Contains(t, ce.Message, "called recursively")
}

// TestScriptNamed: errors name the script as the job's files name it
// (when they hold it), and loaded modules by their own names; a script
// the files do not hold is job.star.
func TestScriptNamed(t *testing.T) {
	main := "load('lib.star', 'f')\ndef main():\n    return f()\n"
	files := map[string]string{"tools/main.star": main, "lib.star": "def f():\n    return 1 // 0\n", "copy.txt": main}
	for _, tc := range []struct {
		name, entry, code string
		files             map[string]string
		kind              airlock.ErrorKind
		want              []string
	}{
		{"runtime", "main", main, files, airlock.ErrRuntime, []string{"tools/main.star:3:", "lib.star:2:", "in main", "in f"}},
		{"toplevel", "", main + "result = main()\n", map[string]string{"m.star": main + "result = main()\n", "lib.star": files["lib.star"]},
			airlock.ErrRuntime, []string{"m.star:4:", "lib.star:2:"}},
		{"compile", "", "x = (1", map[string]string{"bad.star": "x = (1"}, airlock.ErrCompile, []string{"bad.star:1:"}},
		{"resolve", "", "y = nope", map[string]string{"bad.star": "y = nope"}, airlock.ErrCompile, []string{"bad.star:1:", "undefined"}},
		{"module compile", "", "load('lib.star', 'f')", map[string]string{"lib.star": "def f(:"}, airlock.ErrCompile, []string{"lib.star:1:"}},
		{"self load", "", "load('me.star', 'x')", map[string]string{"me.star": "load('me.star', 'x')"}, airlock.ErrRuntime, []string{"load cycle: me.star -> me.star"}},
		{"not held", "", "fail('x')", map[string]string{"other.star": "fail('y')"}, airlock.ErrRuntime, []string{"job.star:1:"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := run(t, airlock.Job{Kind: airlock.KindStarlark, Code: tc.code, Entry: tc.entry, Files: tc.files})
			var ce *airlock.ErrorInfo
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, tc.kind, ce.Kind, ce.Message)
			for _, w := range tc.want {
				assert.Contains(t, ce.Message, w)
			}
			if tc.name != "not held" {
				assert.NotContains(t, ce.Message, "job.star")
			}
		})
	}
	// In a session too.
	sess, err := newTier(t).OpenSession(context.Background(), airlock.SessionOptions{})
	require.NoError(t, err)
	defer sess.Close()
	_, err = sess.Run(context.Background(), airlock.Job{Kind: airlock.KindStarlark, Code: "fail('s')", Files: map[string]string{"s.star": "fail('s')"}})
	var ce *airlock.ErrorInfo
	require.ErrorAs(t, err, &ce)
	assert.Contains(t, ce.Message, "s.star:1:")
}

func TestAdmit(t *testing.T) {
	tier := newTier(t)
	for name, mutate := range map[string]func(*airlock.Job){
		"fs":      func(j *airlock.Job) { j.Grants.FS.Read = []string{"/etc"} },
		"scratch": func(j *airlock.Job) { j.Grants.FS.ScratchMB = 1 },
		"net":     func(j *airlock.Job) { j.Grants.Net = []airlock.NetRule{{Host: "example.com"}} },
		"spawn":   func(j *airlock.Job) { j.Grants.Spawn = true },
		"secrets": func(j *airlock.Job) { j.Grants.Secrets = map[string]string{"TOKEN": "x"} },
		"kind":    func(j *airlock.Job) { j.Kind = airlock.KindExpr },
	} {
		j := job("result = 1")
		mutate(&j)
		err := tier.Admit(j)
		var na *airlock.NotAdmitted
		require.ErrorAs(t, err, &na, name)
		assert.Equal(t, starlark.Name, na.Tier)
		_, err = tier.Run(context.Background(), j)
		require.ErrorAs(t, err, &na, name)
		if name == "net" {
			assert.Contains(t, na.Reason, "egress gateway")
		}
	}
	ok := job("result = 1")
	assert.NoError(t, tier.Admit(ok))
	allocs := testing.AllocsPerRun(100, func() { _ = tier.Admit(ok) })
	assert.Zero(t, allocs, "Admit allocates on success")
}

func TestDeterminism(t *testing.T) {
	code := `
load_time = time.now()
r = [random.random(), random.randint(1, 1000000), random.choice(["a", "b", "c", "d"])]
l = list(range(20))
random.shuffle(l)
result = [str(load_time), load_time.unix, r, l]`
	j := job(code)
	j.Clock = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	j.Seed = 7
	a, err := run(t, j)
	require.NoError(t, err)
	b, err := run(t, j)
	require.NoError(t, err)
	assert.Equal(t, a.Value, b.Value)
	v := a.Value.([]any)
	assert.Contains(t, v[0], "2030-01-02 03:04:05")
	assert.Equal(t, j.Clock.Unix(), v[1])
	j.Seed = 8
	c, err := run(t, j)
	require.NoError(t, err)
	assert.NotEqual(t, a.Value.([]any)[2], c.Value.([]any)[2])
}

func TestTimeZonesRefused(t *testing.T) {
	for _, code := range []string{
		`time.time(year=2020, location="Europe/Berlin")`,
		`time.parse_time("2020-01-01T00:00:00Z", location="America/New_York")`,
		`time.now().in_location("Asia/Tokyo")`,
	} {
		_, err := run(t, job("x = "+code))
		var ce *airlock.ErrorInfo
		require.ErrorAs(t, err, &ce, code)
		assert.Contains(t, ce.Message, "only UTC", code)
	}
	res, err := run(t, job(`result = [time.is_valid_timezone("UTC"), time.is_valid_timezone("Europe/Berlin"), time.from_timestamp(0).format("2006-01-02T15:04:05Z07:00")]`))
	require.NoError(t, err)
	assert.Equal(t, []any{true, false, "1970-01-01T00:00:00Z"}, res.Value)
}

func TestLoad(t *testing.T) {
	j := job(`load("lib.star", "double")
load("sub/other.star", "K")
result = double(K)`)
	j.Files = map[string]string{
		"lib.star":       "def double(x):\n    return x * 2",
		"sub/other.star": "K = 21",
		"notes.txt":      "K = 1",
	}
	res, err := run(t, j)
	require.NoError(t, err)
	assert.Equal(t, int64(42), res.Value)

	j.Code = `load("notes.txt", "K")`
	_, err = run(t, j)
	var ce *airlock.ErrorInfo
	require.ErrorAs(t, err, &ce)
	assert.Contains(t, ce.Message, "only job files ending in .star")

	j.Code = `load("a.star", "A")`
	j.Files = map[string]string{"a.star": `load("b.star", "B")` + "\nA = 1", "b.star": `load("a.star", "A")` + "\nB = 1"}
	_, err = run(t, j)
	require.ErrorAs(t, err, &ce)
	assert.Contains(t, ce.Message, "load cycle: a.star -> b.star -> a.star")

	// A loaded module is frozen once it has run, as upstream's loaders
	// leave it: neither the loader nor the module's own functions change it.
	j.Files = map[string]string{"lib.star": "L = [1]\ndef add(x):\n    L.append(x)\nadd(2)"}
	for code, want := range map[string]string{
		`load("lib.star", "L")` + "\nL.append(3)":   "cannot append to frozen list",
		`load("lib.star", "add")` + "\nadd(3)":      "cannot append to frozen list",
		`load("lib.star", "L")` + "\nresult = L[1]": "",
	} {
		j.Code = code
		res, err := run(t, j)
		if want == "" {
			require.NoError(t, err)
			assert.Equal(t, int64(2), res.Value)
			continue
		}
		require.ErrorAs(t, err, &ce, code)
		assert.Contains(t, ce.Message, want, code)
	}

	for _, path := range []string{"/etc/passwd", "../job.star", "~/x.star"} {
		j := job(`load("` + path + `", "x")`)
		_, err = run(t, j)
		var d *airlock.Denied
		require.ErrorAs(t, err, &d, path)
		assert.Equal(t, "fs", d.Capability)
	}
}

func TestSession(t *testing.T) {
	tier := newTier(t)
	s, err := tier.OpenSession(context.Background(), airlock.SessionOptions{})
	require.NoError(t, err)
	defer s.Close()
	ctx := context.Background()
	_, err = s.Run(ctx, job("x = 1\nitems = []\ndef bump():\n    items.append(len(items))"))
	require.NoError(t, err)
	res, err := s.Run(ctx, job("x = x + 1\nbump()\nbump()\nresult = [x, items]"))
	require.NoError(t, err)
	assert.Equal(t, []any{int64(2), []any{int64(0), int64(1)}}, res.Value)
	res, err = s.Run(ctx, job("y = 3"))
	require.NoError(t, err)
	assert.Nil(t, res.Value, "result from an earlier run leaked into this one")

	other, err := tier.OpenSession(ctx, airlock.SessionOptions{})
	require.NoError(t, err)
	_, err = other.Run(ctx, job("result = x"))
	var ce *airlock.ErrorInfo
	require.ErrorAs(t, err, &ce, "sessions share globals")

	require.NoError(t, s.Close())
	_, err = s.Run(ctx, job("result = x"))
	var na *airlock.NotAdmitted
	require.ErrorAs(t, err, &na)

	exp, err := tier.OpenSession(ctx, airlock.SessionOptions{TTL: time.Millisecond})
	require.NoError(t, err)
	time.Sleep(5 * time.Millisecond)
	_, err = exp.Run(ctx, job("x = 1"))
	require.ErrorAs(t, err, &na)
}

func TestStopsKeepOutput(t *testing.T) {
	j := job("print('partial')\nx = 'x' * ((1 << 30) - 1)")
	res, err := run(t, j)
	var st *airlock.Stop
	require.ErrorAs(t, err, &st)
	assert.Equal(t, airlock.StopMemory, st.Reason)
	assert.Equal(t, "partial\n", res.Stdout)
	assert.Equal(t, airlock.StopMemory, res.Stopped.Reason)

	j = job("print('partial')\nfor i in range(1000000000):\n    pass")
	j.Limits.Steps = 10000
	res, err = run(t, j)
	require.ErrorAs(t, err, &st)
	assert.Equal(t, airlock.StopSteps, st.Reason)
	assert.Equal(t, "partial\n", res.Stdout)
	assert.GreaterOrEqual(t, res.Usage.Steps, int64(10000))
}

func TestCancelInsideBuiltin(t *testing.T) {
	// One step that would loop for hours: the builtin itself must notice.
	for _, code := range []string{"x = max(range(1 << 62), key=lambda v: v)", "x = any([False for i in range(0)]) or all(range(1, 1 << 62))", "x = sorted(range(1 << 22), key=lambda v: -v)"} {
		j := job(code)
		j.Limits.WallMS = 200
		j.Limits.MemoryMB = 8192
		start := time.Now()
		_, err := run(t, j)
		var st *airlock.Stop
		require.ErrorAs(t, err, &st, code)
		assert.Contains(t, []airlock.StopReason{airlock.StopTimeout, airlock.StopSteps, airlock.StopMemory}, st.Reason, code)
		t.Logf("%s: %v after %v", code, st, time.Since(start))
	}
}

func TestInvalidAndHugeCode(t *testing.T) {
	tier, err := starlark.New(starlark.NewConfig().WithMaxCodeBytes(100))
	require.NoError(t, err)
	_, err = tier.Run(context.Background(), job("x = 1"+strings.Repeat("+1", 100)))
	var inv *airlock.InvalidJob
	require.ErrorAs(t, err, &inv)
	assert.Equal(t, "code", inv.Field)

	_, err = starlark.New(starlark.NewConfig().WithCacheSize(-1))
	assert.Error(t, err)
	_, err = starlark.New(starlark.NewConfig().WithMaxCodeBytes(0))
	assert.Error(t, err)

	_, err = run(t, job("x = 1"+strings.Repeat("+1", 100000)))
	var ce *airlock.ErrorInfo
	require.ErrorAs(t, err, &ce)
	assert.Contains(t, ce.Message, "nested more than")
	assert.True(t, errors.Is(err, err))
}

func TestProgramCache(t *testing.T) {
	tier, err := starlark.New(starlark.NewConfig().WithCacheSize(2))
	require.NoError(t, err)
	ctx := context.Background()
	for i, code := range []string{"result = 1", "result = 2", "result = 1", "result = 3", "result = 4"} {
		res, err := tier.Run(ctx, job(code))
		require.NoError(t, err, i)
		assert.Equal(t, int64(code[len(code)-1]-'0'), res.Value)
	}
	assert.Equal(t, 2, tier.CachedPrograms())
	// The same code with input names is a different program (the resolver
	// binds the names), and a run sees only its own input.
	j := job("result = n")
	j.Input = map[string]any{"n": int64(5)}
	res, err := tier.Run(ctx, j)
	require.NoError(t, err)
	assert.Equal(t, int64(5), res.Value)
	_, err = tier.Run(ctx, job("result = n"))
	var ce *airlock.ErrorInfo
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, airlock.ErrCompile, ce.Kind)

	off, err := starlark.New(starlark.NewConfig().WithCacheSize(0))
	require.NoError(t, err)
	_, err = off.Run(ctx, job("result = 1"))
	require.NoError(t, err)
	assert.Zero(t, off.CachedPrograms())
}

func TestIntInferenceIsSound(t *testing.T) {
	// Names that look like integers somewhere but are bound to something
	// else elsewhere must keep the growth check.
	for _, code := range []string{
		"x = 0\nx = 'ab'\nfor i in range(64):\n    x = x + x",
		"def f(x):\n    for i in range(64):\n        x = x + x\n    return x\nx = 0\ny = f('ab')",
		"range = lambda n: ['ab'] * n\nfor s in range(1):\n    for i in range(64):\n        s = s + s",
		"x = 'ab'\ndef f():\n    x = 0\n    return x\nfor i in range(64):\n    x += x",
	} {
		_, err := run(t, job(code))
		var st *airlock.Stop
		require.ErrorAs(t, err, &st, code)
		assert.Equal(t, airlock.StopMemory, st.Reason, code)
	}
	// s is an integer inside f, but the top level reads the input's s.
	j := job("def f():\n    s = 1\n    return s\ny = s + s\nfor i in range(64):\n    y = y + y")
	j.Input = map[string]any{"s": "ab"}
	_, err := run(t, j)
	var st *airlock.Stop
	require.ErrorAs(t, err, &st)
	assert.Equal(t, airlock.StopMemory, st.Reason)
}

func TestOutputCapKeepsUTF8(t *testing.T) {
	j := job(`print("é" * 100)`)
	j.Limits.OutputBytes = 11
	res, err := run(t, j)
	var st *airlock.Stop
	require.ErrorAs(t, err, &st)
	assert.Equal(t, airlock.StopOutput, st.Reason)
	assert.Equal(t, strings.Repeat("é", 5), res.Stdout)
}

// TestValueWithinOutputCap: the script's value counts as output, as an
// expression's does: a result larger than limits.output_bytes stops the
// run, whatever memory it was allowed.
func TestValueWithinOutputCap(t *testing.T) {
	for code, stopped := range map[string]bool{
		`result = "x" * 5000`:        true,
		`result = ["ab"] * 2000`:     true,
		`result = {"k": "v" * 900}`:  false,
		`def f(): return "y" * 4000`: true,
		`result = "z" * 10`:          false,
	} {
		j := job(code)
		if strings.HasPrefix(code, "def") {
			j.Entry = "f"
		}
		j.Limits.OutputBytes = 1000
		res, err := run(t, j)
		var st *airlock.Stop
		if got := errors.As(err, &st) && st.Reason == airlock.StopOutput; got != stopped {
			t.Errorf("%s: %v (value of %T), want stopped for output: %v", code, err, res.Value, stopped)
		}
	}
}

func TestWallClockBetweenSteps(t *testing.T) {
	// Each step scans millions of elements; a few hundred of them fit
	// between two step-based polls. The scan itself must poll.
	for _, code := range []string{
		"big = [0] * 4000000\nfor i in range(400):\n    if 1 in big:\n        pass",
		"big = tuple([0] * 4000000)\nfor i in range(400):\n    if 1 not in big:\n        pass",
		"big = [0] * 4000000\nn = 1\nfor i in range(400):\n    if n in big:\n        pass",
	} {
		j := job(code)
		j.Limits.WallMS = 300
		start := time.Now()
		_, err := run(t, j)
		took := time.Since(start)
		var st *airlock.Stop
		require.ErrorAs(t, err, &st, code)
		assert.Equal(t, airlock.StopTimeout, st.Reason, code)
		assert.Less(t, took, 2*time.Second, "%q stopped %v after a 300ms wall clock", code, took)
	}
}

// TestLinearWorkCounted: one step that scans, hashes, compares or moves
// a value of tens of megabytes, or formats an integer of hundreds of
// thousands of bits, takes milliseconds, and thousands of steps run
// between two step-based polls. Such work is counted as steps, so the
// wall clock is looked at within a few milliseconds of work. The step
// limit is raised out of the way: the wall clock must end each run.
func TestLinearWorkCounted(t *testing.T) {
	const s = "s = 'a' * (32 << 20)\nt = s[:-1] + 'b'\n"
	const l = "l = [0] * (2 << 20)\n"
	const x = "x = 1\nfor i in range(520):\n    x = (x << 500) + 1\nxs = (x,) * 64\n"
	for _, code := range []string{
		s + "for i in range(5000):\n    s.count('b')",
		s + "for i in range(5000):\n    s.find('b')",
		s + "for i in range(5000):\n    s.isalpha()",
		s + "for i in range(5000):\n    s.split('b')",
		s + "for i in range(5000):\n    if 'b' in s:\n        pass",
		s + "for i in range(5000):\n    if s == t:\n        pass",
		s + "ts = [t] * 64\nfor i in range(5000):\n    if s in ts:\n        pass",
		s + "ks = (s,) * 4\nd = {}\nfor i in range(5000):\n    d[ks] = i",
		s + "d = {}\nfor i in range(5000):\n    d.get(s)",
		s + "for i in range(5000):\n    hash(s)",
		s + "for i in range(5000):\n    sorted([s, t, s, t])",
		s + "for i in range(5000):\n    max(s, t)",
		s + "for i in range(5000):\n    set([s])",
		l + "for i in range(5000):\n    l.insert(0, i)",
		l + "for i in range(5000):\n    l.pop(0)",
		x + "for i in range(50000):\n    str(x)",
		x + "for i in range(50000):\n    str(xs)",
		x + "for i in range(50000):\n    ('%d' * 64) % xs",
	} {
		j := job(code)
		j.Limits.WallMS = 300
		j.Limits.Steps = 10_000_000_000
		j.Limits.MemoryMB = 4096 // the budget is not what stops these
		start := time.Now()
		_, err := run(t, j)
		took := time.Since(start)
		assertStop(t, err, airlock.StopTimeout, code)
		assert.Less(t, took, 1500*time.Millisecond, "%q stopped %v after a 300ms wall clock", code, took)
	}
}

// TestSharedStringsRefused: a tuple or list that shares one long string
// many times costs no memory, but upstream hashes or compares every copy
// in full in one step after the cost walk; past the budget's worth of
// bytes the walk refuses.
func TestSharedStringsRefused(t *testing.T) {
	const s = "s = 'a' * (32 << 20)\nt = s[:-1] + 'b'\n"
	for _, code := range []string{
		s + "d = {}\nd[(s,) * 100000] = 1",
		s + "x = {(s,) * 100000: 1}",
		s + "x = set([(s,) * 100000])",
		s + "x = [s] * 100000 == [t] * 100000",
		s + "x = ([s] * 100000).index(t)",
		s + "x = set([1]).issuperset([(s,) * 100000])",
		s + "x = set([1]).issubset([(s,) * 100000])",
		// Each element is hashed once when added, and all again when
		// sets are compared.
		"s = 'a' * (8 << 20)\nx, y = set(), set()\nfor i in range(20):\n    x.add((s, i))\n    y.add((s, i))\nz = x == y",
	} {
		start := time.Now()
		_, err := run(t, job(code))
		var ce *airlock.ErrorInfo
		if assert.ErrorAs(t, err, &ce, code) {
			assert.Contains(t, ce.Message, "bytes of strings", code)
		}
		assert.Less(t, time.Since(start), 5*time.Second, code)
	}
}

// TestSharedStringsInsertedOneByOne: set() and dict() insert each key
// themselves, counting its hashing as work; a long string repeated is
// not refused as a shared tuple is.
func TestSharedStringsInsertedOneByOne(t *testing.T) {
	res, err := run(t, job("s = 'a' * (32 << 20)\nresult = [len(set([s] * 20)), len(dict([(s, 1)] * 20))]"))
	require.NoError(t, err)
	assert.Equal(t, []any{int64(1), int64(1)}, res.Value)
	assert.Greater(t, res.Usage.Steps, int64(2*20*(32<<20)/256))
}

// TestLinearWorkIsSteps: the same work counts against the step limit.
func TestLinearWorkIsSteps(t *testing.T) {
	j := job("s = 'a' * (1 << 20)\nfor i in range(100):\n    s.count('b')")
	res, err := run(t, j)
	require.NoError(t, err)
	assert.Greater(t, res.Usage.Steps, int64(100*(1<<20)/256), "100 scans of 1 MiB")
	j.Limits.Steps = 100_000
	_, err = run(t, j)
	var st *airlock.Stop
	require.ErrorAs(t, err, &st)
	assert.Equal(t, airlock.StopSteps, st.Reason)
}

func TestRangeExtremes(t *testing.T) {
	// Ranges whose elements span more than 2^63: slicing, length and
	// membership must not overflow (a zero step divided by zero).
	res, err := run(t, job(`
r = range(0, (1 << 63) - 1, 1 << 62)
s = r[::4]
w = range(-(1 << 63), (1 << 63) - 1, 1 << 62)
result = [len(r), len(s), list(s), 1 in s, 0 in s, len(w), (1 << 62) in w, -(1 << 62) in w, 5 in w, list(w[::3])]`))
	require.NoError(t, err)
	assert.Equal(t, []any{int64(2), int64(1), []any{int64(0)}, false, true, int64(4), true, true, false,
		[]any{int64(-1 << 63), int64(1 << 62)}}, res.Value)

	_, err = run(t, job("r = range(-(1 << 63), (1 << 63) - 1)"))
	var ei *airlock.ErrorInfo
	require.ErrorAs(t, err, &ei)
	assert.Contains(t, ei.Message, "range: more than")
}

func TestCopiesCharged(t *testing.T) {
	// Each step copies a large value the script already holds; kept, the
	// copies grow the heap far past the budget unless each is charged.
	for _, code := range []string{
		"big = list(range(100000))\nkeep = [big[::1] for i in range(1000)]",
		"big = list(range(100000))\nkeep = [big[:] for i in range(1000)]",
		"big = tuple(range(100000))\nkeep = [big[::-1] for i in range(1000)]",
		"s = 'ab' * 500000\nkeep = [s[::-1] for i in range(1000)]",
		"s = 'ab' * 500000\nkeep = [s.upper() for i in range(1000)]",
		"d = dict([(i, i) for i in range(20000)])\nkeep = [d.items() for i in range(1000)]",
		"d = dict([(i, i) for i in range(20000)])\nkeep = [d.values() for i in range(1000)]",
		"s = set(range(20000))\nkeep = [s | s for i in range(1000)]",
		"s = set(range(20000))\nkeep = [s.union(s) for i in range(1000)]",
		"s = set(range(20000))\nkeep = [s - set() for i in range(1000)]",
		"s = set(range(20000))\nkeep = []\nfor i in range(1000):\n    t = s\n    t -= set()\n    keep.append(t)",
		"d = dict([(i, i) for i in range(20000)])\nkeep = [d | d for i in range(1000)]",
		"d = dict([(i, i) for i in range(20000)])\nkeep = []\nfor i in range(1000):\n    e = {}\n    e |= d\n    keep.append(e)",
		"d = dict([(i, i) for i in range(20000)])\nkeep = []\nfor i in range(1000):\n    e = {}\n    e.update(d)\n    keep.append(e)",
	} {
		j := job(code)
		j.Limits.MemoryMB = 64
		_, err := run(t, j)
		assertStop(t, err, airlock.StopMemory, code)
	}
}

func TestHashingBounded(t *testing.T) {
	// Upstream hashes tuples recursively, with no depth limit and no
	// cancellation: a chain millions deep overflows the Go stack (a fatal
	// error, not a panic), and a tuple sharing itself 64 levels deep
	// hashes 2^64 nodes. Every place that hashes a key must refuse both.
	sites := []string{
		"x = {t: 1}", "x = {t: 1 for i in range(1)}", "d = {}\nx = d[t]", "d = {}\nd[t] = 1",
		"d = {}\nx = d.get(t)", "d = {}\nx = d.pop(t, 0)", "d = {}\nd.setdefault(t)",
		"s = set()\ns.add(t)", "s = set()\ns.discard(t)", "s = set()\ns.remove(t)", "x = set([t])",
		"x = dict([(t, 1)])", "d = {}\nd.update([(t, 1)])", "s = set()\nx = s.union([t])",
		"d = {}\nd[t] *= 2", "k = [t]\nd = {}\nd[k[0]] = 1",
		"s = set([1])\nx = s.issubset([t])", "s = set([1])\nx = s.issuperset([t])",
	}
	for _, build := range []string{
		"t = ()\nfor i in range(2000):\n    t = (t,)\n",
		"t = ()\nfor i in range(64):\n    t = (t, t)\n",
	} {
		for _, site := range sites {
			code := build + site
			j := job(code)
			j.Limits.WallMS = 2000
			_, err := run(t, j)
			assertRuntime(t, err, code)
		}
	}
}

func TestListSearchBounded(t *testing.T) {
	// list.index and list.remove compare containers as == does: lists
	// sharing their parts ten levels deep compare 1000^10 pairs.
	for _, site := range []string{"x = [b].index(a)", "l = [b]\nl.remove(a)"} {
		code := "a = [0] * 1000\nb = [0] * 1000\nfor i in range(8):\n    a = [a] * 1000\n    b = [b] * 1000\n" + site
		j := job(code)
		j.Limits.WallMS = 2000
		_, err := run(t, j)
		assertRuntime(t, err, code)
	}
}

func TestSpreadCharged(t *testing.T) {
	// f(*x) and f(**x) copy x into the call's arguments in one step.
	for _, code := range []string{
		"big = list(range(100000))\ndef f(*a):\n    return a\nkeep = [f(*big) for i in range(1000)]",
		"d = dict([(str(i), i) for i in range(20000)])\ndef f(**kw):\n    return kw\nkeep = [f(**d) for i in range(1000)]",
	} {
		j := job(code)
		j.Limits.MemoryMB = 64
		_, err := run(t, j)
		assertStop(t, err, airlock.StopMemory, code)
	}
}

func TestJSONDecodeBigInt(t *testing.T) {
	// Decoding an integer is quadratic in its digits (a million took
	// seconds in one step); refused past 4300 digits, as int() is.
	for _, code := range []string{
		`x = json.decode("9" * 100000)`,
		`x = json.decode("[1, -" + "9" * 5000 + "]")`,
		`x = json.decode('{"a": "x", "b": ' + "9" * 5000 + '}')`,
	} {
		_, err := run(t, job(code))
		var ei *airlock.ErrorInfo
		if assert.ErrorAs(t, err, &ei, code) {
			assert.Contains(t, ei.Message, "exceeds the limit of 4300 digits", code)
		}
	}
	res, err := run(t, job(`result = json.decode('[1.5e3, -12, "`+strings.Repeat("9", 5000)+`", 1`+strings.Repeat("0", 300)+`.5]')[:2]`))
	require.NoError(t, err)
	assert.Equal(t, []any{1500.0, int64(-12)}, res.Value)
}

func TestLoadFreezeBounded(t *testing.T) {
	// Upstream freezes a loaded module recursively with no depth limit: a
	// value nested millions deep overflowed the Go stack (fatal). Values
	// nested past 10000 levels are refused; cycles, sharing, tuples and
	// closures still freeze.
	for _, mod := range []string{
		"x = []\nfor i in range(20000):\n    x = [x]\n",
		"x = ()\nfor i in range(20000):\n    x = ([], x)\n",
		"x = {}\nfor i in range(20000):\n    x = {'k': x}\n",
		"t = ()\nfor i in range(64):\n    t = (t, t)\nx = [t]\n",
	} {
		j := job("load('m.star', 'x')\nresult = 1")
		j.Files = map[string]string{"m.star": mod}
		_, err := run(t, j)
		var ei *airlock.ErrorInfo
		if assert.ErrorAs(t, err, &ei, mod) {
			assert.Contains(t, ei.Message, "cannot be frozen", mod)
		}
	}
	j := job(`load('m.star', 'x', 'f', 'g')
result = [len(x), type(f), g()[0], str(x[2])]`)
	j.Files = map[string]string{"m.star": `
a = [1]
a.append(a)
t = ((a, [2]), [3])
x = [a, t, [t, t]]
def mk(v):
    return lambda: v
f = mk([4])
def g(d = [5]):
    return d
`}
	res, err := run(t, j)
	require.NoError(t, err)
	assert.Equal(t, []any{int64(3), "function", int64(5), "[(([1, [...]], [2]), [3]), (([1, [...]], [2]), [3])]"}, res.Value)
	for _, code := range []string{"load('m.star', 'f')\nf().append(1)", "load('m.star', 'g')\ng().append(1)", "load('m.star', 'x')\nx[2][0][0][1].append(1)", "load('m.star', 'x')\nx[0][1].append(1)"} {
		j.Code = code
		_, err = run(t, j)
		var ei *airlock.ErrorInfo
		if assert.ErrorAs(t, err, &ei, code) {
			assert.Contains(t, ei.Message, "frozen", code)
		}
	}
}

// assertStop asserts that err stopped the run for reason (code names the
// case).
func assertStop(t *testing.T, err error, reason airlock.StopReason, code string) {
	t.Helper()
	var st *airlock.Stop
	if assert.ErrorAs(t, err, &st, code) {
		assert.Equal(t, reason, st.Reason, code)
	}
}

// assertRuntime asserts that err is a runtime error (code names the case).
func assertRuntime(t *testing.T, err error, code string) {
	t.Helper()
	var ei *airlock.ErrorInfo
	if assert.ErrorAs(t, err, &ei, code) {
		assert.Equal(t, airlock.ErrRuntime, ei.Kind, code)
	}
}
