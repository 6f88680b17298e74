package airlock_test

import (
	"encoding/json"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/value"
)

// An image is for command jobs, and a reference is one word of printable
// ASCII (what a console or approval shows is what the store reads); the
// image store judges the rest.
func TestValidateImage(t *testing.T) {
	for _, job := range []airlock.Job{
		{Kind: airlock.KindExpr, Code: "1", Image: "python"},
		{Kind: airlock.KindCommand, Argv: []string{"true"}, Image: "py thon"},
		{Kind: airlock.KindCommand, Argv: []string{"true"}, Image: "python\n"},
		{Kind: airlock.KindCommand, Argv: []string{"true"}, Image: strings.Repeat("p", 513)},
		{Kind: airlock.KindCommand, Argv: []string{"true"}, Image: "pyth\u009bon"},          // a C1 control (CSI)
		{Kind: airlock.KindCommand, Argv: []string{"true"}, Image: "l\u043ecalhost/tool:1"}, // a Cyrillic o
		{Kind: airlock.KindCommand, Argv: []string{"true"}, Image: "python\u202e"},          // a right-to-left override
	} {
		var inv *airlock.InvalidJob
		if err := job.Validate(); !errors.As(err, &inv) || inv.Field != "image" {
			t.Errorf("%q on a %s job: %v, want an invalid image", job.Image, job.Kind, err)
		}
	}
	ok := airlock.Job{Kind: airlock.KindCommand, Argv: []string{"true"}, Image: "registry.example/team/tool@sha256:" + strings.Repeat("a", 64)}
	if err := ok.Validate(); err != nil {
		t.Errorf("a pinned reference: %v", err)
	}
}

func TestDecodeJobStrict(t *testing.T) {
	cases := map[string]string{
		`{"kind":"expr","code":"1","nope":1}`:                     "nope",
		`{"kind":"expr","code":1}`:                                "code",
		`{"kind":"expr","code":"1","limits":{"wall_ms":"x"}}`:     "limits.wall_ms",
		`{"kind":"expr","code":"1","clock":"yesterday"}`:          "clock",
		`{"kind":"expr","code":"1","clock":5}`:                    "clock",
		`{"kind":"wasm","module":"!!!"}`:                          "module",
		`{"kind":"expr","code":"1","grants":{"fs":{"write":[]}}}`: "write",
		`{"kind":"wasm","module":"AA==","env":{"A":1}}`:           "env",
		`{"kind":"command","argv":["true"],"image":7}`:            "image",
		`{"kind":"wasm","module":"AA==","env":["A=1"]}`:           "env",
		`{"kind":"expr"`: "",
		`[]`:             "",
		`null`:           "",
		`{} {}`:          "",
		``:               "",
	}
	for in, field := range cases {
		_, err := airlock.DecodeJob([]byte(in))
		var inv *airlock.InvalidJob
		require.True(t, errors.As(err, &inv), "%q: %v", in, err)
		assert.Equal(t, field, inv.Field, "%q: %v", in, err)
	}
	_, err := airlock.DecodeJob([]byte(`{"kind":"expr","code":"` + strings.Repeat("x", value.MaxJobBytes) + `"}`))
	assert.ErrorContains(t, err, "larger than")
}

// A refused job is named in JSON's words: no Go type names, no "<nil>",
// and a bare null is no job at all.
func TestDecodeJobErrorsSpeakJSON(t *testing.T) {
	for _, in := range []string{
		`null`, `[]`, `"x"`, `5`, `true`, `nul`,
		`{"kind":"expr","code":"1","grants":[]}`,
		`{"kind":"expr","code":"1","limits":5}`,
		`{"kind":"expr","code":"1","grants":{"net":{}}}`,
		`{"kind":"expr","code":"1","grants":{"credentials":[1]}}`,
		`{"kind":"command","argv":["true"],"files":[]}`,
		`{"kind":"expr","code":"1"}}`,
	} {
		_, err := airlock.DecodeJob([]byte(in))
		require.Error(t, err, in)
		assert.Equal(t, airlock.ErrInvalid, airlock.KindOf(err), "%s: %v", in, err)
		assert.NotRegexp(t, `airlock\.|map\[|\[\]|interface|json\.|<nil>|Go value`, err.Error(), in)
	}
}

func TestDecodeJobValues(t *testing.T) {
	job, err := airlock.DecodeJob([]byte(`{"kind":"expr","code":"x","input":{"i":3,"f":2.5,"e":1e3,"big":123456789012345678901234567890,"list":[1,{"n":2}]},"clock":"2024-01-02T03:04:05Z","seed":9007199254740991}`))
	require.NoError(t, err)
	assert.Equal(t, int64(3), job.Input["i"])
	assert.Equal(t, 2.5, job.Input["f"])
	assert.Equal(t, 1000.0, job.Input["e"])
	assert.Equal(t, "123456789012345678901234567890", job.Input["big"].(*big.Int).String())
	assert.Equal(t, []any{int64(1), map[string]any{"n": int64(2)}}, job.Input["list"])
	assert.Equal(t, uint64(value.MaxSeed), job.Seed)
	assert.True(t, job.Clock.Equal(time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)))
}

func TestPrepare(t *testing.T) {
	job, err := airlock.DefaultLimitPolicy().Prepare(airlock.Job{Kind: "expr", Code: "1"})
	require.NoError(t, err)
	assert.Equal(t, airlock.DefaultLimitPolicy().Default, job.Limits)
	assert.Equal(t, airlock.SituationPublic, job.Situation)
	assert.Equal(t, airlock.LifecycleEphemeral, job.Lifecycle)
	assert.False(t, job.Clock.IsZero())
	assert.NotZero(t, job.Seed)
	assert.LessOrEqual(t, job.Seed, uint64(value.MaxSeed))

	bad := []airlock.Job{
		{Kind: "expr"},
		{Kind: "cobol", Code: "x"},
		{Kind: "command"},
		{Kind: "command", Argv: []string{"a\x00b"}},
		// Not UTF-8: the wire form (JSON) and the tiers' own cannot carry it.
		{Kind: "command", Argv: []string{"echo", "a\xffb"}},
		{Kind: "command", Argv: []string{"env"}, Env: map[string]string{"A": "a\xffb"}},
		{Kind: "command", Argv: []string{"env"}, Grants: airlock.Grants{Secrets: map[string]string{"A": "a\xffb"}}},
		{Kind: "wasm"},
		{Kind: "expr", Code: "1", Limits: airlock.Limits{WallMS: 1 << 40}},
		{Kind: "expr", Code: "1", Limits: airlock.Limits{MemoryMB: -1}},
		{Kind: "expr", Code: "1", Files: map[string]string{"/etc/passwd": ""}},
		{Kind: "expr", Code: "1", Files: map[string]string{"a/../../b": ""}},
		{Kind: "expr", Code: "1", Files: map[string]string{"a//b": ""}},
		{Kind: "expr", Code: "1", Grants: airlock.Grants{FS: airlock.FSGrant{Read: []string{"relative"}}}},
		{Kind: "expr", Code: "1", Grants: airlock.Grants{Net: []airlock.NetRule{{Host: ""}}}},
		{Kind: "expr", Code: "1", Grants: airlock.Grants{Net: []airlock.NetRule{{Host: "a", Methods: []string{"get"}}}}},
		{Kind: "expr", Code: "1", Grants: airlock.Grants{Net: []airlock.NetRule{{Host: "a", Ports: []int{70000}}}}},
		{Kind: "expr", Code: "1", Grants: airlock.Grants{Secrets: map[string]string{"1X": "v"}}},
		{Kind: "expr", Code: "1", Lifecycle: "session"},
		{Kind: "expr", Code: "1", Input: map[string]any{"f": func() {}}},
		{Kind: "expr", Code: "1", Env: map[string]string{"A": "1"}},
		{Kind: "starlark", Code: "1", Env: map[string]string{"A": "1"}},
		{Kind: "wasm", Module: []byte{0}, Env: map[string]string{"A=B": "1"}},
		{Kind: "wasm", Module: []byte{0}, Env: map[string]string{"": "1"}},
		{Kind: "wasm", Module: []byte{0}, Env: map[string]string{"A": "a\x00b"}},
		{Kind: "wasm", Module: []byte{0}, Env: map[string]string{"TOKEN": "1"}, Grants: airlock.Grants{Secrets: map[string]string{"TOKEN": "2"}}},
	}
	for _, j := range bad {
		_, err := airlock.DefaultLimitPolicy().Prepare(j)
		var inv *airlock.InvalidJob
		assert.True(t, errors.As(err, &inv), "%+v: %v", j, err)
	}
}

// TestJobEnv: env is plain job data: it decodes strictly, survives a
// round trip through the wire format, and grants nothing.
func TestJobEnv(t *testing.T) {
	job, err := airlock.DecodeJob([]byte(`{"kind":"wasm","module":"AA==","env":{"LANG":"C.UTF-8","EMPTY":""}}`))
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"LANG": "C.UTF-8", "EMPTY": ""}, job.Env)
	assert.True(t, job.Grants.Hermetic())
	data, err := json.Marshal(job)
	require.NoError(t, err)
	back, err := airlock.DecodeJob(data)
	require.NoError(t, err)
	assert.Equal(t, job, back)
	_, err = airlock.DefaultLimitPolicy().Prepare(job)
	require.NoError(t, err)
	job.Kind, job.Module, job.Argv = airlock.KindCommand, nil, []string{"env"}
	_, err = airlock.DefaultLimitPolicy().Prepare(job)
	require.NoError(t, err, "command jobs carry env")
}

func TestResultErrorsRoundTrip(t *testing.T) {
	errs := []error{
		&airlock.Stop{Reason: airlock.StopTimeout, Detail: "wall clock of 1s exceeded"},
		&airlock.Denied{Capability: "net", Detail: "connect 10.0.0.1:80"},
		&airlock.NotAdmitted{Reason: "no tier"},
		&airlock.NotAdmitted{Tier: "gvisor", Reason: "a pinned clock"},
		&airlock.InvalidJob{Reason: "bad"},
		&airlock.InvalidJob{Field: "limits.wall_ms", Reason: "too long"},
		&airlock.ErrorInfo{Kind: airlock.ErrCompile, Message: "x"},
		&airlock.ErrorInfo{Kind: airlock.ErrRuntime, Message: "boom"},
	}
	for _, e := range errs {
		var res airlock.Result
		res.SetError(e)
		data, err := json.Marshal(res)
		require.NoError(t, err)
		var back airlock.Result
		require.NoError(t, json.Unmarshal(data, &back))
		got := back.Err()
		require.Error(t, got)
		assert.Equal(t, airlock.KindOf(e), airlock.KindOf(got), "%v", e)
		s1, ok1 := airlock.AsStop(e)
		s2, ok2 := airlock.AsStop(got)
		assert.Equal(t, ok1, ok2)
		assert.Equal(t, s1, s2)
		// The same words once: a result passed on (the guarded tiers'
		// workers, the account's executor) reads as the original.
		assert.Equal(t, e.Error(), got.Error())
	}
}

func TestExportValue(t *testing.T) {
	v, err := value.Export(map[string][]int{"a": {1, 2}})
	require.NoError(t, err)
	assert.Equal(t, map[string]any{"a": []any{int64(1), int64(2)}}, v)
	v, err = value.Export(uint64(1 << 63))
	require.NoError(t, err)
	assert.Equal(t, "9223372036854775808", v.(*big.Int).String())
	for _, bad := range []any{func() {}, make(chan int), map[int]int{1: 1}} {
		_, err := value.Export(bad)
		assert.Error(t, err, "%T", bad)
	}
}

func TestLevels(t *testing.T) {
	for l := airlock.LevelInterpreter; l <= airlock.LevelAccount; l++ {
		var back airlock.Level
		require.NoError(t, json.Unmarshal([]byte(`"`+l.String()+`"`), &back))
		assert.Equal(t, l, back)
	}
	var l airlock.Level
	require.NoError(t, json.Unmarshal([]byte(`"container"`), &l))
	assert.Equal(t, airlock.LevelContainer, l)
	require.NoError(t, json.Unmarshal([]byte(`4`), &l))
	assert.Equal(t, airlock.LevelVirtualisation, l)
	assert.Error(t, json.Unmarshal([]byte(`9`), &l))
}

// FuzzDecodeJob: no input makes the decoder panic, and whatever decodes
// either validates or is refused with a typed error.
func FuzzDecodeJob(f *testing.F) {
	for _, s := range []string{
		`{"kind":"expr","code":"x * 2","input":{"x":21}}`,
		`{"kind":"command","argv":["sh","-c","echo hi"],"grants":{"net":[{"host":"a.example","methods":["GET"]}]},"limits":{"wall_ms":100}}`,
		`{"kind":"wasm","module":"AGFzbQEAAAA=","entry":"f"}`,
		`{"kind":"starlark","code":"result = 1","files":{"a/b.star":"x"},"clock":"2024-01-01T00:00:00Z","seed":1}`,
		`{"input":{"a":[1,2,{"b":1e400}]}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		job, err := airlock.DecodeJob(data)
		if err != nil {
			var inv *airlock.InvalidJob
			if !errors.As(err, &inv) {
				t.Fatalf("decode error is not *InvalidJob: %T %v", err, err)
			}
			return
		}
		if _, err := airlock.DefaultLimitPolicy().Prepare(job); err != nil {
			var inv *airlock.InvalidJob
			if !errors.As(err, &inv) {
				t.Fatalf("prepare error is not *InvalidJob: %T %v", err, err)
			}
		}
	})
}

// TestFSPlacement: grants.fs.at and grants.fs.copy decode from the wire
// and name only host paths that are also in grants.fs.read, so every
// check of host paths (read roots, approvals, explain) sees them.
func TestFSPlacement(t *testing.T) {
	job, err := airlock.DecodeJob([]byte(`{"kind":"wasm","module":"AA==","grants":{"fs":{"read":["/srv/a","/srv/b"],"at":{"/srv/a":"/"},"copy":["/srv/b"]}}}`))
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"/srv/a": "/"}, job.Grants.FS.At)
	assert.Equal(t, []string{"/srv/b"}, job.Grants.FS.Copy)
	assert.Equal(t, "/", job.Grants.FS.GuestPath("/srv/a"))
	assert.Equal(t, "/srv/b", job.Grants.FS.GuestPath("/srv/b"))
	_, err = airlock.DefaultLimitPolicy().Prepare(job)
	require.NoError(t, err)
	assert.False(t, job.Grants.Hermetic())

	fsJob := func(fs airlock.FSGrant) airlock.Job {
		return airlock.Job{Kind: "wasm", Module: []byte{0}, Grants: airlock.Grants{FS: fs}}
	}
	bad := map[string]struct {
		job   airlock.Job
		field string
	}{
		"at names a host path not read":     {fsJob(airlock.FSGrant{At: map[string]string{"/etc": "/data"}}), "grants.fs.at"},
		"at beside another read":            {fsJob(airlock.FSGrant{Read: []string{"/srv"}, At: map[string]string{"/etc": "/srv"}}), "grants.fs.at"},
		"copy names a host path not read":   {fsJob(airlock.FSGrant{Copy: []string{"/etc"}}), "grants.fs.copy"},
		"copy beside another read":          {fsJob(airlock.FSGrant{Read: []string{"/srv"}, Copy: []string{"/etc"}}), "grants.fs.copy"},
		"copy twice":                        {fsJob(airlock.FSGrant{Read: []string{"/srv"}, Copy: []string{"/srv", "/srv"}}), "grants.fs.copy"},
		"relative guest":                    {fsJob(airlock.FSGrant{Read: []string{"/srv"}, At: map[string]string{"/srv": "data"}}), "grants.fs.at"},
		"unclean guest":                     {fsJob(airlock.FSGrant{Read: []string{"/srv"}, At: map[string]string{"/srv": "/a/../b"}}), "grants.fs.at"},
		"guest /proc":                       {fsJob(airlock.FSGrant{Read: []string{"/srv"}, At: map[string]string{"/srv": "/proc"}}), "grants.fs.at"},
		"guest under /sys":                  {fsJob(airlock.FSGrant{Read: []string{"/srv"}, At: map[string]string{"/srv": "/sys/x"}}), "grants.fs.at"},
		"guest under /dev":                  {fsJob(airlock.FSGrant{Read: []string{"/srv"}, At: map[string]string{"/srv": "/dev/shm"}}), "grants.fs.at"},
		"two grants one guest path":         {fsJob(airlock.FSGrant{Read: []string{"/srv", "/opt"}, At: map[string]string{"/srv": "/data", "/opt": "/data"}}), "grants.fs.at"},
		"guest path is another's host path": {fsJob(airlock.FSGrant{Read: []string{"/srv", "/opt"}, At: map[string]string{"/srv": "/opt"}}), "grants.fs.at"},
		// A read shown at its own path may not lie in the sandbox's own
		// /proc, /sys or /dev either.
		"read under /proc": {fsJob(airlock.FSGrant{Read: []string{"/proc/1"}}), "grants.fs.read"},
		"read /sys":        {fsJob(airlock.FSGrant{Read: []string{"/sys"}}), "grants.fs.read"},
		"read under /dev":  {fsJob(airlock.FSGrant{Read: []string{"/dev/null"}}), "grants.fs.read"},
	}
	// Placed elsewhere, a host path there is the operator's to grant; a
	// name that only begins like one is not under it.
	for _, fs := range []airlock.FSGrant{
		{Read: []string{"/proc/1"}, At: map[string]string{"/proc/1": "/host-init"}},
		{Read: []string{"/procedures", "/devices", "/system"}},
	} {
		_, err := airlock.DefaultLimitPolicy().Prepare(fsJob(fs))
		assert.NoError(t, err, "%+v", fs)
	}
	for name, c := range bad {
		_, err := airlock.DefaultLimitPolicy().Prepare(c.job)
		var inv *airlock.InvalidJob
		if assert.True(t, errors.As(err, &inv), "%s: %v", name, err) {
			assert.Equal(t, c.field, inv.Field, name)
			assert.NotContains(t, err.Error(), "\n", name)
		}
	}
	_, err = airlock.DecodeJob([]byte(`{"kind":"wasm","module":"AA==","grants":{"fs":{"read":["/srv"],"mount":{"/srv":"/"}}}}`))
	assert.Error(t, err, "an unknown fs field decodes")
}

// Member names are matched exactly and given once: encoding/json would
// take "Kind" for "kind" and let a repeated member win silently, so that a
// proxy, a log or a person reading the job sees another job than airlock.
func TestDecodeJobExactMembers(t *testing.T) {
	cases := map[string]string{
		`{"kind":"expr","code":"1","Kind":"wasm"}`:                                      "Kind",
		`{"kind":"expr","code":"1","kind":"command"}`:                                   "kind",
		`{"kind":"command","argv":["ls"],"Argv":["rm"]}`:                                "Argv",
		`{"kind":"command","argv":["true"],"env":{"A":"1","A":"2"}}`:                    "env.A",
		`{"kind":"command","argv":["true"],"grants":{"fs":{"Read":["/"]}}}`:             "grants.fs.Read",
		`{"kind":"command","argv":["true"],"grants":{"net":[{"host":"a","HOST":"b"}]}}`: "grants.net.HOST",
		`{"kind":"command","argv":["true"],"files":{"a":"1","a":"2"}}`:                  "files.a",
		`{"kind":"command","argv":["true"],"limits":{"wall_ms":1,"wall_ms":9}}`:         "limits.wall_ms",
		`{"kind":"expr","code":"x","input":{"x":1,"x":2}}`:                              "input.x",
		`{"kind":"expr","code":"1","input":{"a":{"b":[0,{"c":1,"c":1}]}}}`:              "input.a.b.c",
	}
	for in, field := range cases {
		_, err := airlock.DecodeJob([]byte(in))
		var inv *airlock.InvalidJob
		if assert.True(t, errors.As(err, &inv), "%s: %v", in, err) {
			assert.Equal(t, field, inv.Field, "%s: %v", in, err)
		}
	}
	// Nulls, and input keys that differ only in case, stay as they were.
	for _, in := range []string{
		`{"kind":"expr","code":"1","grants":null,"limits":null,"files":null,"argv":null,"env":null}`,
		`{"kind":"expr","code":"x.A","input":{"x":{"A":1,"a":2}}}`,
	} {
		_, err := airlock.DecodeJob([]byte(in))
		assert.NoError(t, err, in)
	}
}

// A job that is not UTF-8 is refused rather than run with U+FFFD in place
// of the bytes that were sent.
func TestDecodeJobRefusesNonUTF8(t *testing.T) {
	for _, in := range []string{
		"{\"kind\":\"expr\",\"code\":\"\\\"\xff\\\"\"}",
		"{\"kind\":\"command\",\"argv\":[\"printf\",\"\xc3\"]}",
	} {
		_, err := airlock.DecodeJob([]byte(in))
		if assert.Error(t, err, "%q", in) {
			assert.Contains(t, err.Error(), "not UTF-8", "%q", in)
		}
	}
}

// TestKindInMessages: a refusal that names a job's kind reads as English
// ("an expr job", "a starlark job"); a field the kind does not use (env,
// image, entry) is refused, not ignored.
func TestKindInMessages(t *testing.T) {
	for _, tc := range []struct {
		job  airlock.Job
		want string
	}{
		{airlock.Job{Kind: airlock.KindExpr, Code: "1", Env: map[string]string{"A": "B"}}, "env: an expr job has no environment"},
		{airlock.Job{Kind: airlock.KindStarlark, Code: "1", Env: map[string]string{"A": "B"}}, "env: a starlark job has no environment"},
		{airlock.Job{Kind: airlock.KindExpr, Code: "1", Image: "python"}, "image: an expr job runs in no image"},
		{airlock.Job{Kind: airlock.KindExpr, Code: "1", Entry: "f"}, "entry: an expr job calls no entry function (entry is for starlark and wasm jobs)"},
		{airlock.Job{Kind: airlock.KindCommand, Argv: []string{"true"}, Entry: "f"}, "entry: a command job calls no entry function"},
	} {
		err := tc.job.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.job, err, tc.want)
		}
	}
}
