package main

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/airlock-sandbox/airlock"
)

func applyFlags(t *testing.T, args ...string) (airlock.Job, error) {
	t.Helper()
	var jf jobFlags
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	jf.register(fs, true)
	require.NoError(t, fs.Parse(args))
	job := airlock.Job{Kind: airlock.KindCommand, Argv: []string{"true"}}
	return job, jf.apply(&job)
}

// The permission flags become the job's grants, as a job file would
// state them.
func TestPermissionFlags(t *testing.T) {
	t.Setenv("AIRLOCK_TEST_TOKEN", "s3cret")
	job, err := applyFlags(t,
		"--allow-net", "api.example.com:8443=get,post",
		"--allow-net", "pypi.org",
		"--allow-net", "*.example.org:8080",
		"--scratch", "64", "--allow-spawn",
		"--secret", "AIRLOCK_TEST_TOKEN",
		"--env", "MODE=fast", "--env", "EMPTY=")
	require.NoError(t, err)
	assert.Equal(t, []airlock.NetRule{
		{Host: "api.example.com", Ports: []int{8443}, Methods: []string{"GET", "POST"}},
		{Host: "pypi.org"},
		{Host: "*.example.org", Ports: []int{8080}},
	}, job.Grants.Net)
	assert.Equal(t, int64(64), job.Grants.FS.ScratchMB)
	assert.True(t, job.Grants.Spawn)
	assert.Equal(t, map[string]string{"AIRLOCK_TEST_TOKEN": "s3cret"}, job.Grants.Secrets)
	assert.Equal(t, map[string]string{"MODE": "fast", "EMPTY": ""}, job.Env)

	for _, c := range []struct{ args []string }{
		{[]string{"--allow-net", "example.com:http"}},
		{[]string{"--allow-net", "example.com:0"}},
		{[]string{"--allow-net", "example.com=GET,"}},
		{[]string{"--allow-net", "https://example.com"}},
		{[]string{"--allow-net", ":443"}},
		// What the egress gateway would refuse is refused at the flag:
		// addresses are pinned by the operator, never granted by a rule.
		{[]string{"--allow-net", "[::1]:8080"}},
		{[]string{"--allow-net", "127.0.0.1"}},
		{[]string{"--allow-net", "bad:host:x"}},
		{[]string{"--allow-net", "*.com"}},
		{[]string{"--secret", "AIRLOCK_TEST_UNSET_VARIABLE"}},
		{[]string{"--env", "NOVALUE"}},
		{[]string{"--scratch", "-1"}},
	} {
		_, err := applyFlags(t, c.args...)
		assert.Equal(t, airlock.ErrInvalid, airlock.KindOf(err), "%v: %v", c.args, err)
	}
}

// --allow-read and --read take a path relative to the working directory
// as the absolute path it names there; an empty one is a usage error.
func TestRelativeReadFlags(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	require.NoError(t, os.Mkdir(filepath.Join(dir, "data"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "data", "a.txt"), []byte("a\n"), 0o644))
	t.Chdir(dir)
	job, err := applyFlags(t, "--allow-read", "data", "--read", "./data/../data/a.txt")
	require.NoError(t, err)
	assert.Equal(t, []string{filepath.Join(dir, "data"), filepath.Join(dir, "data", "a.txt")}, job.Grants.FS.Read)

	// A job file's own absolute grant lies under the relative root.
	job = airlock.Job{Kind: airlock.KindCommand, Argv: []string{"true"}}
	job.Grants.FS.Read = []string{filepath.Join(dir, "data", "a.txt")}
	jf := jobFlags{}
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	jf.register(fs, true)
	require.NoError(t, fs.Parse([]string{"--read", "data"}))
	require.NoError(t, jf.apply(&job))
	assert.Equal(t, []string{filepath.Join(dir, "data", "a.txt"), filepath.Join(dir, "data")}, job.Grants.FS.Read)

	fs = flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	(&jobFlags{}).register(fs, true)
	assert.Error(t, fs.Parse([]string{"--allow-read", ""}))

	// explain takes the same relative paths.
	_, errOut, code := run(t, "", "explain", "--allow-read", "")
	assert.Equal(t, exitUsage, code, errOut)
	out, _, code := run(t, "", "explain", "--json", "--tier", "process", "--allow-read", "data")
	assert.Equal(t, exitOK, code, out)

	needProcess(t)
	out, errOut, code = run(t, "", "run", "--tier", "process", "--allow-read", "data", "--", "cat", filepath.Join(dir, "data", "a.txt"))
	require.Equal(t, exitOK, code, errOut)
	assert.Equal(t, "a\n", out)
}

// The flags reach a real sandbox: spawn, scratch and a secret on the
// process tier.
func TestPermissionFlagsRun(t *testing.T) {
	needProcess(t)
	t.Setenv("AIRLOCK_TEST_TOKEN", "s3cret")
	out, errOut, code := run(t, "", "run", "--tier", "process", "--allow-spawn", "--secret", "AIRLOCK_TEST_TOKEN", "--",
		"sh", "-c", `echo "$AIRLOCK_TEST_TOKEN" | cat`)
	require.Equal(t, exitOK, code, errOut)
	assert.Equal(t, "s3cret\n", out)
	out, errOut, code = run(t, "", "run", "--tier", "process", "--env", "A=1", "--env", "PATH=/usr/bin:/bin", "--", "sh", "-c", `echo "$A $PATH"`)
	require.Equal(t, exitOK, code, errOut)
	assert.Equal(t, "1 /usr/bin:/bin\n", out, "--env reaches the program and replaces the default PATH")
}

// --read-at shows a host directory at a guest path and --copy gives one
// as a writable copy: paths relative to the working directory, through a
// link resolved to the real path, run on the process tier; the host files
// stay as they were. A bad --read-at is one line, exit 2.
func TestReadAtAndCopyFlags(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	for _, d := range []string{"in", "work"} {
		require.NoError(t, os.Mkdir(filepath.Join(dir, d), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, d, "a.txt"), []byte(d+"\n"), 0o644))
	}
	require.NoError(t, os.Symlink("work", filepath.Join(dir, "alias")))
	t.Chdir(dir)
	job, err := applyFlags(t, "--read-at", "in=/data", "--copy", "alias")
	require.NoError(t, err)
	in, work := filepath.Join(dir, "in"), filepath.Join(dir, "work")
	assert.Equal(t, []string{in, work}, job.Grants.FS.Read)
	assert.Equal(t, map[string]string{in: "/data"}, job.Grants.FS.At)
	assert.Equal(t, []string{work}, job.Grants.FS.Copy, "the copy follows the read grant to its real path")

	for _, bad := range []string{"in", "=/data", "in="} {
		_, errOut, code := run(t, "", "run", "--tier", "process", "--read-at", bad, "--", "true")
		assert.Equal(t, exitUsage, code, "--read-at %q: %s", bad, errOut)
		assert.Equal(t, 1, strings.Count(strings.TrimSpace(errOut), "\n")+1, "one line: %q", errOut)
	}
	_, errOut, code := run(t, "", "run", "--tier", "process", "--read-at", "in=data", "--", "true")
	assert.Equal(t, exitUsage, code, "a relative guest path: %s", errOut)

	needProcess(t)
	out, errOut, code := run(t, "", "run", "--tier", "process", "--read-at", "in=/data", "--copy", "work", "--", "sh", "-c",
		`read a < /data/a.txt && echo "$a" && echo changed > `+work+`/a.txt && read b < `+work+`/a.txt && echo "$b"`)
	require.Equal(t, exitOK, code, errOut)
	assert.Equal(t, "in\nchanged\n", out)
	got, err := os.ReadFile(filepath.Join(work, "a.txt"))
	require.NoError(t, err)
	assert.Equal(t, "work\n", string(got), "the copy's change reached the host")
}
