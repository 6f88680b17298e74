package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
	"github.com/airlock-sandbox/airlock/internal/value"
)

func run(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Run(context.Background(), args, strings.NewReader(stdin), &out, &errb)
	return out.String(), errb.String(), code
}

func TestEval(t *testing.T) {
	out, _, code := run(t, "", "eval", "1 + 2")
	assert.Equal(t, exitOK, code)
	assert.Equal(t, "3\n", out)

	out, _, code = run(t, "", "eval", "--input", `{"items": [3, 4]}`, "items[0] % 2")
	assert.Equal(t, exitOK, code)
	assert.Equal(t, "1\n", out)

	_, errOut, code := run(t, "", "eval", "--input", `{"a": {"b": 1, "b": 2}}`, "a.b")
	assert.Equal(t, exitUsage, code)
	assert.Equal(t, "airlock: invalid job: input.a.b: given twice\n", errOut)

	_, errOut, code = run(t, "", "eval", "1 +")
	assert.Equal(t, exitFailed, code)
	assert.Contains(t, errOut, "compile error")
	assert.Equal(t, 1, strings.Count(errOut, "\n"), "one clear line: %q", errOut)

	_, errOut, code = run(t, "", "eval", `repeat("x", 100000000000)`)
	assert.Equal(t, exitStopped, code)
	assert.Contains(t, errOut, "memory")
}

func TestRunJSON(t *testing.T) {
	out, _, code := run(t, `{"kind":"expr","code":"x * 2","input":{"x":21}}`, "run", "--json", "-")
	require.Equal(t, exitOK, code, out)
	var res map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	assert.Equal(t, float64(42), res["value"])
	assert.Equal(t, "expr", res["tier"])

	// Invalid input still yields exactly one Result, naming the field.
	for _, bad := range []string{`{"kind":"expr","code":"1","bogus":1}`, `{"kind":"expr","code":1}`, `not json`, ``, `{"kind":"expr","code":"1"} {}`} {
		out, _, code := run(t, bad, "run", "--json", "-")
		assert.Equal(t, exitUsage, code, bad)
		var res struct {
			Error struct{ Kind, Message string }
		}
		require.NoError(t, json.Unmarshal([]byte(out), &res), "%q gave %q", bad, out)
		assert.Equal(t, "invalid", res.Error.Kind, bad)
	}
	out, _, _ = run(t, `{"kind":"expr","code":1}`, "run", "--json", "-")
	assert.Contains(t, out, "code: wrong type")

	// Big integers keep every digit.
	out, _, code = run(t, `{"kind":"expr","code":"x","input":{"x":123456789012345678901234567890}}`, "run", "--json", "-")
	require.Equal(t, exitOK, code)
	assert.Contains(t, out, `"value": 123456789012345678901234567890`)

	// A stopped run is one Result with the reason, and a distinct exit code.
	out, _, code = run(t, `{"kind":"expr","code":"repeat(\"x\", 100000000000)"}`, "run", "--json", "-")
	assert.Equal(t, exitStopped, code)
	assert.Contains(t, out, `"reason": "memory"`)
}

// TestRunJSONMeansOutput: --json is the Result as JSON whatever the job's
// source; a Job is read from -, a .json FILE or --job FILE, with or without
// --json.
func TestRunJSONMeansOutput(t *testing.T) {
	dir := t.TempDir()
	star := filepath.Join(dir, "double.star")
	require.NoError(t, os.WriteFile(star, []byte("result = x * 2"), 0o644))
	jobFile := filepath.Join(dir, "job.json")
	require.NoError(t, os.WriteFile(jobFile, []byte(`{"kind":"expr","code":"x * 2","input":{"x":21}}`), 0o644))

	// A script file, --json: one Result.
	out, errOut, code := run(t, "", "run", "--json", star, "--input", `{"x": 4}`)
	require.Equal(t, exitOK, code, errOut)
	var res airlock.Result
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	assert.Equal(t, float64(8), res.Value)
	assert.Equal(t, "starlark", res.Tier)

	// A Job, without --json: its value as run prints any.
	for _, args := range [][]string{{"run", "-"}, {"run", jobFile}, {"run", "--job", jobFile}, {"run", "--job", "-"}} {
		out, errOut, code := run(t, `{"kind":"expr","code":"x * 2","input":{"x":21}}`, args...)
		assert.Equal(t, exitOK, code, "%v: %s", args, errOut)
		assert.Equal(t, "42\n", out, args)
	}
	// The flags add to a Job read as JSON.
	out, _, code = run(t, "", "run", "--json", "--input", `{"x": 5}`, jobFile)
	require.Equal(t, exitOK, code)
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	assert.Equal(t, float64(10), res.Value)

	// Code on stdin with --kind is still code.
	out, _, code = run(t, "6 * 7", "run", "--kind", "expr", "-")
	assert.Equal(t, exitOK, code)
	assert.Equal(t, "42\n", out)

	// Wrong combinations: one line, or one Result with --json.
	for _, args := range [][]string{{"run", "--job", jobFile, star}, {"run", jobFile, "--", "x"}, {"run", "--kind", "expr", "--job", jobFile}} {
		_, errOut, code := run(t, "", args...)
		assert.Equal(t, exitUsage, code, args)
		assert.Equal(t, 1, strings.Count(errOut, "\n"), "%v: one line: %q", args, errOut)
	}
	out, _, code = run(t, "", "run", "--json")
	assert.Equal(t, exitUsage, code)
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	require.NotNil(t, res.Error, out)
	assert.Contains(t, res.Error.Message, "nothing to run")
}

// TestHelpNamesEveryValue: every flag's value in every command's help is
// named for what it is (PATH, DURATION, N), never Go's type name, and the
// limit flags are spelled alike everywhere.
func TestHelpNamesEveryValue(t *testing.T) {
	typeName := regexp.MustCompile(`(?m)^  --(\S+) (string|int|int64|uint|uint64|float64|duration|value)$`)
	for name := range commands {
		errOut, _, _ := run(t, "", name, "-h")
		for _, m := range typeName.FindAllStringSubmatch(errOut, -1) {
			t.Errorf("airlock %s --%s: value shown as %q; name it in the flag's help (`NAME`)", name, m[1], m[2])
		}
	}
	for _, name := range []string{"run", "eval", "call"} {
		errOut, _, _ := run(t, "", name, "-h")
		for _, want := range []string{"\n  --wall DURATION\n", "\n  --memory MB\n", "\n  --output BYTES\n"} {
			assert.Contains(t, errOut, want, name)
		}
	}
}

func TestRunFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "double.expr")
	require.NoError(t, os.WriteFile(file, []byte("x * 2"), 0o644))
	out, _, code := run(t, "", "run", file, "--input", `{"x": 4}`)
	assert.Equal(t, exitOK, code)
	assert.Equal(t, "8\n", out)

	unknown := filepath.Join(dir, "x.unknown")
	require.NoError(t, os.WriteFile(unknown, []byte("data"), 0o644))
	_, errOut, code := run(t, "", "run", unknown)
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, "--kind")
	_, errOut, code = run(t, "", "run", filepath.Join(dir, "missing.expr"))
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, "no such file")

	_, _, code = run(t, "", "run")
	assert.Equal(t, exitUsage, code)
}

func TestExplainAndTiers(t *testing.T) {
	out, _, code := run(t, "", "tiers")
	assert.Equal(t, exitOK, code)
	assert.Contains(t, out, "expr")

	out, _, code = run(t, `{"kind":"expr","code":"1"}`, "explain", "-")
	assert.Equal(t, exitOK, code)
	assert.Contains(t, out, "chosen:    expr")

	out, _, code = run(t, "", "explain", "--json", "--kind", "command", "--situation", "credentials")
	assert.Equal(t, exitNotAdmitted, code)
	assert.Contains(t, out, `"refused"`)
}

// explain takes run's job flags and gives run's verdict: a job run would
// refuse is not explained as chosen.
func TestExplainAgreesWithRun(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	store := t.TempDir()
	for _, c := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"--credential", "TOKEN=github"}, exitNotAdmitted, "grants.credentials are resolved only at level 5"},
		{[]string{"--allow-read", missing}, exitUsage, "no such file or directory"},
		{[]string{"--allow-net", "*.com"}, exitUsage, "a wildcard needs at least two labels"},
		{[]string{"--allow-net", "127.0.0.1"}, exitUsage, "IP literal"},
		{[]string{"--images", store, "--image", "python:latest"}, exitUsage, "not pinned by digest"},
		{[]string{"--images", store, "--image", "nosuch"}, exitUsage, "unknown image name"},
	} {
		eOut, eErr, eCode := run(t, "", append([]string{"explain", "--kind", "command"}, c.args...)...)
		rOut, rErr, rCode := run(t, "", append(append([]string{"run"}, c.args...), "--", "true")...)
		assert.Equal(t, c.code, eCode, "explain %v: %s%s", c.args, eOut, eErr)
		assert.Equal(t, c.code, rCode, "run %v: %s%s", c.args, rOut, rErr)
		assert.Contains(t, eOut+eErr, c.says, "explain %v", c.args)
		assert.Contains(t, rOut+rErr, c.says, "run %v", c.args)
	}
}

// TestExplainReadCap: a read grant the microVM cannot copy into its guest
// (over its cap; a sparse file, so nothing is written) is refused there
// with the reason on one line.
func TestExplainReadCap(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "big"))
	require.NoError(t, err)
	require.NoError(t, f.Truncate(2<<30))
	require.NoError(t, f.Close())
	out, _, code := run(t, "", "explain", "--tier", "microvm", "--allow-read", dir)
	if strings.Contains(out, "not admitted by microvm: unavailable") {
		testenv.Skipf(t, "the microvm tier is unavailable here: %s", out)
	}
	assert.Equal(t, exitNotAdmitted, code, out)
	assert.Contains(t, out, "refused:   not admitted by microvm: host read path "+dir+" is over the microvm tier's cap for read grants")
}

func TestUsageErrors(t *testing.T) {
	_, errOut, code := run(t, "", "frobnicate")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, "unknown command")
	_, _, code = run(t, "", "eval", "--no-such-flag", "1")
	assert.Equal(t, exitUsage, code)
	out, _, code := run(t, "", "help")
	assert.Equal(t, exitOK, code)
	assert.Contains(t, out, "eval")
	// A bad flag value is one line naming the flag, not the whole usage.
	_, errOut, code = run(t, "", "run", "--wall", "soon", "--", "true")
	assert.Equal(t, exitUsage, code)
	assert.Equal(t, 1, strings.Count(errOut, "\n"), errOut)
	assert.Contains(t, errOut, "airlock run: invalid value \"soon\" for --wall: want a duration such as 30s, 500ms or 2m")
	// Every flag error names the flag as the help does, with its value's form.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--memory", "lots", "--", "true"}, `invalid value "lots" for --memory: want a whole number`},
		{[]string{"run", "--json=maybe", "-"}, `invalid value "maybe" for --json: want true or false`},
		{[]string{"eval", "--frobnicate", "1"}, "airlock eval: unknown flag --frobnicate"},
		{[]string{"run", "--wall"}, "airlock run: --wall needs a value"},
	} {
		_, errOut, code = run(t, "", tc.args...)
		assert.Equal(t, exitUsage, code, tc.args)
		assert.Equal(t, 1, strings.Count(errOut, "\n"), errOut)
		assert.Contains(t, errOut, tc.want, tc.args)
		assert.NotContains(t, errOut, "for flag -", tc.args)
	}
	// -h is the whole usage, and not an error: on stdout, as for
	// `airlock --help`, so that it pipes into a pager or grep.
	help, errOut, code := run(t, "", "run", "-h")
	assert.Equal(t, exitOK, code)
	assert.Empty(t, errOut)
	errOut = help
	assert.Contains(t, errOut, "flags:")
	// Flags are listed as they are best spelled, GNU-style, with their
	// value's form and any default.
	assert.Contains(t, errOut, "\n  --allow-read PATH\n")
	assert.Regexp(t, `\n  --wall DURATION\n`, errOut)
	assert.NotRegexp(t, `\n  -[a-z]`, errOut)
	// The errors point at `airlock help CMD`: it is the same help, flags
	// included, for every command.
	for name := range commands {
		if commands[name].run == nil {
			continue // a heavy command of the lean build
		}
		want, _, _ := run(t, "", name, "--help")
		got, errOut, code := run(t, "", "help", name)
		assert.Equal(t, exitOK, code, name)
		assert.Equal(t, want, got, "airlock help %s is airlock %s --help", name, name)
		assert.Contains(t, got, "usage: airlock "+name, name)
		assert.Empty(t, errOut, name)
	}
	_, errOut, code = run(t, "", "help", "frobnicate")
	assert.Equal(t, exitUsage, code)
	assert.Equal(t, "airlock: unknown command \"frobnicate\" (see `airlock help`)\n", errOut)
	// Missing or extra arguments are one line too, naming what is wanted.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"eval"}, "airlock eval: takes an EXPR to evaluate (see `airlock help eval`)\n"},
		{[]string{"call", "tool.wasm"}, "airlock call: takes a TOOL.wasm and the FUNC to call (see `airlock help call`)\n"},
		{[]string{"explain", "a.json", "b.json"}, "airlock explain: takes at most one JOB.json (or - for stdin) (see `airlock help explain`)\n"},
	} {
		out, errOut, code := run(t, "", tc.args...)
		assert.Equal(t, exitUsage, code, tc.args)
		assert.Empty(t, out, tc.args)
		assert.Equal(t, tc.want, errOut, tc.args)
	}
	out, _, code = run(t, "", "--version")
	assert.Equal(t, exitOK, code)
	assert.Regexp(t, `^airlock (v\S+|devel\S*) \(go1\.\d+`, out)
}

// TestDefaultSituationHint: a job refused under the default situation
// says so (plain and --json); with a situation given the hint is gone. A
// job file's own "tier" field does not imply a situation.
func TestDefaultSituationHint(t *testing.T) {
	out, _, code := run(t, `{"kind":"command","argv":["true"],"tier":"process"}`, "run", "--json", "-")
	assert.Equal(t, exitNotAdmitted, code)
	assert.Contains(t, out, "the job names no situation, so public applies")
	_, errOut, code := run(t, "", "run", "--tier", "seccomp", "--", "true")
	assert.Equal(t, exitNotAdmitted, code, "level 2 is below internal too: nothing is implied")
	assert.Contains(t, errOut, "the job names no situation, so public applies")
	assert.Equal(t, 1, strings.Count(errOut, "\n"), "one line: %q", errOut)
	_, errOut, code = run(t, "", "run", "--tier", "process", "--situation", "public", "--", "true")
	assert.Equal(t, exitNotAdmitted, code)
	assert.NotContains(t, errOut, "names no situation")
	out, _, code = run(t, "", "explain", "--tier", "seccomp")
	assert.Equal(t, exitNotAdmitted, code)
	assert.Contains(t, out, "situation: public")
	assert.NotContains(t, out, "implied")
}

// TestTierImpliesSituation: naming a container tier on the command line,
// with no situation, runs the job as internal and records why; the
// issue's own example shows the sandbox's view of the world.
func TestTierImpliesSituation(t *testing.T) {
	out, _, code := run(t, "", "explain", "--tier", "process")
	assert.Equal(t, exitOK, code, out)
	assert.Contains(t, out, "situation internal: implied by --tier process")
	assert.Contains(t, out, "situation: internal")
	assert.Contains(t, out, "chosen:    process")

	needProcess(t)
	out, errOut, code := run(t, "", "run", "--tier", "process", "--image", "host", "--allow-spawn", "--", "sh", "-c", "echo hi; id; ls /")
	require.Equal(t, exitOK, code, errOut)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Greater(t, len(lines), 2, out)
	assert.Equal(t, "hi", lines[0])
	assert.Contains(t, lines[1], "uid=0(root)", "the sandbox's root, mapped to an unprivileged host id")
	root := lines[2:]
	assert.Contains(t, root, "scratch", "the writable scratch")
	assert.Contains(t, root, "usr")
	for _, host := range []string{"home", "root", "var", "srv", "mnt", "opt", "boot"} {
		assert.NotContains(t, root, host, "the host's /%s is not in the sandbox's root", host)
	}

	// The flag implies it for a job file as well, and the Result says so.
	out, _, code = run(t, `{"kind":"command","argv":["true"]}`, "run", "--json", "--tier", "process", "-")
	require.Equal(t, exitOK, code, out)
	var res struct {
		Tier     string
		Decision []string
	}
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	assert.Equal(t, "process", res.Tier)
	require.NotEmpty(t, res.Decision)
	assert.Contains(t, res.Decision[0], "situation internal: implied by --tier process")
}

// The CLI's caller grants host paths with --read; a job file cannot grant
// itself one its caller did not name, directly or through a link.
func TestReadFlag(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o755))
	ok := filepath.Join(dir, "ok.txt")
	require.NoError(t, os.WriteFile(ok, []byte("granted\n"), 0o644))
	require.NoError(t, os.Symlink("/etc/passwd", filepath.Join(dir, "link")))
	for _, job := range []string{
		`{"kind":"command","situation":"internal","argv":["cat","/etc/passwd"],"grants":{"fs":{"read":["/etc/passwd"]}}}`,
		`{"kind":"command","situation":"internal","argv":["cat","/etc/passwd"],"grants":{"fs":{"read":["` + filepath.Join(dir, "link") + `"]}}}`,
	} {
		for _, args := range [][]string{{"run", "--json", "-"}, {"run", "--json", "--read", dir, "-"}} {
			out, _, code := run(t, job, args...)
			assert.Equal(t, exitDenied, code, out)
			assert.Contains(t, out, `"reason": "denied"`, args)
			assert.NotContains(t, out, "root:x:0:0", args)
		}
	}
	needProcess(t)
	out, errOut, code := run(t, "", "run", "--tier", "process", "--read", dir, "--", "cat", ok)
	assert.Equal(t, exitOK, code, errOut)
	assert.Equal(t, "granted\n", out)
	job := `{"kind":"command","situation":"internal","argv":["cat","` + ok + `"],"grants":{"fs":{"read":["` + ok + `"]}}}`
	out, _, code = run(t, job, "run", "--json", "--read", dir, "-")
	assert.Equal(t, exitOK, code, out)
	assert.Contains(t, out, `"stdout": "granted\n"`)
}

// needProcess skips (fails under CI) where the process tier cannot run.
func needProcess(t *testing.T) {
	t.Helper()
	r, closeAll, err := (&routerFlags{}).open()
	require.NoError(t, err)
	why := r.Unavailable("process")
	closeAll()
	if why != nil {
		testenv.Skipf(t, "the process tier is unavailable here: %v", why)
	}
}

// TestProgramExitStatus: a program's own non-zero status is airlock run's
// exit status (plain and --json); airlock's codes stay for its outcomes.
func TestProgramExitStatus(t *testing.T) {
	needProcess(t)
	_, errOut, code := run(t, "", "run", "--tier", "process", "--", "sh", "-c", "exit 7")
	assert.Equal(t, 7, code, errOut)
	assert.Contains(t, errOut, "program exited with status 7")
	out, _, code := run(t, `{"kind":"command","argv":["sh","-c","exit 42"]}`, "run", "--json", "--tier", "process", "-")
	assert.Equal(t, 42, code, out)
	_, _, code = run(t, "", "run", "--tier", "process", "--", "no-such-program")
	assert.Equal(t, 127, code, "a missing program is the shell's 127")
	assert.Equal(t, exitFailed, programExit(-1))
	assert.Equal(t, exitFailed, programExit(256))
}

// TestScriptFiles: a script file runs as a command job, placed in the
// scratch and run by the interpreter its extension or #! line names; --file
// places more files; what cannot be placed is one clear line.
func TestScriptFiles(t *testing.T) {
	needProcess(t)
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
		return p
	}
	data := write("data.txt", "hello\n")
	sh := write("s.sh", "echo \"args: $*\"; cat in/data.txt\n")
	// Without spawn the script may not run cat, and airlock says why.
	_, errOut, code := run(t, "", "run", "--tier", "process", "--file", data+":in/data.txt", sh)
	require.Equal(t, 126, code, errOut)
	assert.Contains(t, errOut, "airlock: program exited with status 126: a refused exec (without --allow-spawn the program may not run other programs)\n")
	assert.NotRegexp(t, `airlock: 12[67] is`, errOut, "the meaning is on the status line, not a line of its own")
	// A script whose interpreter the image lacks: airlock says where to
	// look, not only "not found".
	odd := write("s.odd", "#!/usr/bin/env no-such-interpreter\nprint(1)\n")
	_, errOut, code = run(t, "", "run", "--tier", "process", odd)
	require.Equal(t, 127, code, errOut)
	assert.Contains(t, errOut, "airlock: program exited with status 127: a program not found (the image the job ran in may lack it; --image names another")
	assert.NotRegexp(t, `airlock: 12[67] is`, errOut, "the meaning is on the status line, not a line of its own")
	// The scripts run other programs (cat, the interpreter #! names):
	// they are granted spawn.
	out, errOut, code := run(t, "", "run", "--tier", "process", "--allow-spawn", "--file", data+":in/data.txt", sh, "--", "a", "b")
	require.Equal(t, exitOK, code, errOut)
	assert.Equal(t, "args: a b\nhello\n", out)
	py := write("s.py", "import sys\nprint(sys.argv[1:], open('data.txt').read().strip())\n")
	out, errOut, code = run(t, "", "run", "--tier", "process", "--allow-spawn", "--file", data, py, "--", "x")
	require.Equal(t, exitOK, code, errOut)
	assert.Equal(t, "['x'] hello\n", out)
	tool := write("tool", "#!/usr/bin/env sh\necho from the shebang\n")
	out, errOut, code = run(t, "", "run", "--tier", "process", "--allow-spawn", tool)
	require.Equal(t, exitOK, code, errOut)
	assert.Equal(t, "from the shebang\n", out)

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{data}, "cannot tell the kind"},
		{[]string{"--file", filepath.Join(dir, "missing"), sh}, "--file"},
		{[]string{"--file", data, "--file", data, sh}, "placed twice"},
	} {
		_, errOut, code := run(t, "", append([]string{"run", "--tier", "process"}, c.args...)...)
		assert.Equal(t, exitUsage, code, "%v: %s", c.args, errOut)
		assert.Contains(t, errOut, c.want)
		assert.Equal(t, 1, strings.Count(errOut, "\n"), errOut)
	}
}

// A file the command line names is read only up to what a job may hold:
// a huge file (or /dev/zero) is one clear line, not all the memory there is.
func TestLocalFilesAreBounded(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.star")
	require.NoError(t, os.WriteFile(big, nil, 0o644))
	require.NoError(t, os.Truncate(big, value.MaxJobBytes+1)) // sparse: no disk used
	for _, args := range [][]string{
		{"run", big},
		{"run", "--file", big, "--tier", "process", "--", "true"},
		{"eval", "--input", "@" + big, "1"},
		{"call", big, "f"},
		{"call", "../../examples/greet.wasm", "greet", "--input", "@" + big},
	} {
		_, errOut, code := run(t, "", args...)
		assert.Equal(t, exitUsage, code, "%v: %s", args, errOut)
		assert.Contains(t, errOut, "is larger than a job may be", "%v", args)
		assert.Equal(t, 1, strings.Count(errOut, "\n"), "one line: %q", errOut)
	}
	_, errOut, code := run(t, "", "run", "--file", dir, "--tier", "process", "--", "true")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, "is a directory, not a file")
}

// --input is one JSON object, refused in JSON's words otherwise.
func TestInputFlagErrors(t *testing.T) {
	for _, in := range []string{`[1]`, `5`, `"x"`, `{"x": 1} {"y": 2}`, `{"x": 1} x`, `{`} {
		_, errOut, code := run(t, "", "eval", "--input", in, "x")
		assert.Equal(t, exitUsage, code, "%s: %s", in, errOut)
		assert.Contains(t, errOut, "input: ", in)
		assert.NotRegexp(t, `Go value|map\[|interface`, errOut, in)
		assert.Equal(t, 1, strings.Count(errOut, "\n"), "one line: %q", errOut)
	}
}

// --json is one Result on stdout for every failure, a bad flag included.
func TestRunJSONBadFlag(t *testing.T) {
	for _, args := range [][]string{
		{"run", "--json", "--wall", "x", "--", "true"},
		{"run", "--wall", "x", "--json", "--", "true"},
		{"run", "--json", "--nosuch", "--", "true"},
		{"eval", "--json", "--steps", "many", "1"},
	} {
		out, errOut, code := run(t, "", args...)
		assert.Equal(t, exitUsage, code, "%v", args)
		assert.Empty(t, errOut, "%v", args)
		var res airlock.Result
		dec := json.NewDecoder(strings.NewReader(out))
		require.NoError(t, dec.Decode(&res), "%v: %q", args, out)
		assert.False(t, dec.More(), "%v: more than one Result", args)
		if assert.NotNil(t, res.Error, "%v", args) {
			assert.Equal(t, airlock.ErrInvalid, res.Error.Kind, "%v", args)
		}
	}
	// Without --json (or after --, where it is the program's), one line.
	_, errOut, code := run(t, "", "run", "--wall", "x", "--", "prog", "--json")
	assert.Equal(t, exitUsage, code)
	assert.Equal(t, 1, strings.Count(errOut, "\n"), errOut)
}

// A command that takes no job does not call its bad input an invalid job.
func TestUsageErrorsOutsideJobs(t *testing.T) {
	for _, args := range [][]string{
		{"audit", "verify", "/nonexistent/audit.jsonl"},
		{"completion", "nosuch"},
		{"replay"},
		{"mcp", "extra"},
		{"tiers", "extra"},
		{"images", "extra"},
	} {
		_, errOut, code := run(t, "", args...)
		assert.Equal(t, exitUsage, code, "%v: %s", args, errOut)
		assert.NotContains(t, errOut, "invalid job", "%v", args)
		assert.Equal(t, 1, strings.Count(errOut, "\n"), "one line: %q", errOut)
	}
	_, errOut, code := run(t, `{"kind":"expr","code":1}`, "run", "-")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, "invalid job: code:")
}

// TestTypoInKindOrSituation: a misspelt --kind or --situation (or the
// same field in a job file) is invalid input, exit 2, in one line that
// names the values it takes, not a refusal by the policy (exit 5).
func TestTypoInKindOrSituation(t *testing.T) {
	script := filepath.Join(t.TempDir(), "x.py")
	require.NoError(t, os.WriteFile(script, []byte("print(1)\n"), 0o644))
	for _, tc := range []struct {
		stdin string
		args  []string
		want  string
	}{
		{"", []string{"run", "--situation", "publik", "--", "true"}, `situation: unknown situation "publik" (want expression, internal, public, multi-tenant or credentials)`},
		{"", []string{"run", "--tier", "process", "--situation", "internl", "--", "true"}, `unknown situation "internl"`},
		{"", []string{"run", "--kind", "pythn", script}, `kind: unknown kind "pythn" (want expr, starlark, wasm or command)`},
		{`{"kind":"bogus","code":"1"}`, []string{"run", "-"}, `unknown kind "bogus"`},
		{`{"kind":"command","argv":["true"],"situation":"publik"}`, []string{"run", "-"}, `unknown situation "publik"`},
		{`{"kind":"command","argv":["true"],"situation":"publik"}`, []string{"explain", "-"}, `unknown situation "publik"`},
	} {
		out, errOut, code := run(t, tc.stdin, tc.args...)
		assert.Equal(t, exitUsage, code, "%v: %s", tc.args, errOut)
		assert.Empty(t, out, tc.args)
		assert.Equal(t, 1, strings.Count(errOut, "\n"), errOut)
		assert.Contains(t, errOut, tc.want, tc.args)
	}
	// With --json: one Result whose error is of kind invalid.
	out, _, code := run(t, "", "run", "--json", "--situation", "publik", "--", "true")
	assert.Equal(t, exitUsage, code)
	var res struct {
		Error struct{ Kind, Message string }
	}
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	assert.Equal(t, "invalid", res.Error.Kind)
}

// TestMissingGrantPath: a path that --allow-read, --read-at or --copy
// names and that is not there is one line naming that flag and the
// absolute path it made of what was typed, exit 2 (--json: a Result).
func TestMissingGrantPath(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	missing := filepath.Join(dir, "nosuch")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--allow-read", "nosuch", "--", "true"}, "airlock: invalid job: --allow-read: " + missing + ": no such file or directory"},
		{[]string{"run", "--read-at", "nosuch=/data", "--", "true"}, "airlock: invalid job: --read-at: " + missing + ": no such file or directory"},
		{[]string{"run", "--copy", "nosuch", "--", "true"}, "airlock: invalid job: --copy: " + missing + ": no such file or directory"},
		{[]string{"explain", "--kind", "command", "--allow-read", "nosuch"}, "--allow-read: " + missing},
	} {
		_, errOut, code := run(t, "", tc.args...)
		assert.Equal(t, exitUsage, code, tc.args)
		assert.Equal(t, 1, strings.Count(errOut, "\n"), errOut)
		assert.Contains(t, errOut, tc.want, tc.args)
	}
	out, _, code := run(t, "", "run", "--json", "--allow-read", "nosuch", "--", "true")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, out, `--allow-read: `+missing)
}

// TestStarlarkScriptNamed: a Starlark script run from a file is named as
// the user named it in errors and tracebacks (not job.star); it is placed
// in the job's files, as a command's script is, so --file of the same name
// is placed twice.
func TestStarlarkScriptNamed(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.star")
	require.NoError(t, os.WriteFile(bad, []byte("x = 1\ny = x + \"a\"\n"), 0o644))
	_, errOut, code := run(t, "", "run", bad)
	assert.Equal(t, exitFailed, code)
	assert.Contains(t, errOut, "bad.star:2:", "the traceback names the script")
	assert.NotContains(t, errOut, "job.star")

	_, errOut, code = run(t, "", "run", "--file", bad, bad)
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, "bad.star is placed twice")
}
