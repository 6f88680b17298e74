//go:build !lean

package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/escalate"
	"github.com/airlock-sandbox/airlock/image"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// helpFlag is a flag as a subcommand's help lists it.
type helpFlag struct{ name, arg string }

var helpFlagRE = regexp.MustCompile(`(?m)^  --([a-z0-9-]+)(?: (\S+))?$`)

// listedFlags returns the flags airlock help CMD lists.
func listedFlags(t *testing.T, cmd string) []helpFlag {
	t.Helper()
	out, errOut, code := run(t, "", "help", cmd)
	require.Equal(t, exitOK, code, "%s: %s", cmd, errOut)
	var fl []helpFlag
	for _, m := range helpFlagRE.FindAllStringSubmatch(out, -1) {
		fl = append(fl, helpFlag{m[1], m[2]})
	}
	return fl
}

// flagSamples gives a valid value of each kind of flag value the help
// names, made for the test (files and directories under dir).
func flagSamples(t *testing.T, dir string) map[string]string {
	t.Helper()
	file := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(file, []byte("data\n"), 0o600))
	return map[string]string{
		"DURATION": "30s", "N": "1", "MB": "256", "BYTES": "100000", "SEED": "7",
		"TIME": "2026-01-02T15:04:05Z", "PATH": dir, "DIR": dir, "FILE": file,
		"HOST": "example.com", "HOST[:PORT][=METHOD,...]": "example.com",
		"ENV=REF": "A=B", "NAME=VALUE": "A=B", "LOCAL[:PATH]": file, "HOST=GUEST": dir + "=/guest",
		"TIER:IMAGE=N": "process:python=1", "JSON": "{}", "INPUT": "{}", "TIERS": "expr",
		"IDS": "none", "URL": "http://127.0.0.1:9", "ADDR": "127.0.0.1:0", "HOST:PORT": "127.0.0.1:0",
		"UID": "0", "GID": "0", "KIND": "expr", "SITUATION": "internal", "TIER": "expr", "MODE": "cold",
		"CALLER": "uid-0", "SCOPE": "s", "AUDIENCE": "a", "NOTE": "n", "FUNCTION": "main",
		"PATTERN": "out.txt", "TOOL": "t", "TENANT": "t", "IMAGE": "python", "NAME": "HOME",
		"AREAS": "tiers", "LIST": "", "SOCKET": filepath.Join(dir, "sock"),
	}
}

// TestHelpFlagsParse walks every subcommand's help and gives each flag it
// lists a value of the form the help names: the subcommand takes it (its
// help follows, rather than an error).
func TestHelpFlagsParse(t *testing.T) {
	samples := flagSamples(t, t.TempDir())
	for name, c := range commands {
		if c.run == nil {
			continue // a heavy command of the lean build
		}
		for _, f := range listedFlags(t, name) {
			args := []string{name, "--" + f.name}
			if f.arg != "" {
				v, ok := samples[f.arg]
				if !ok {
					t.Errorf("airlock %s --%s %s: no sample value for %s; add one", name, f.name, f.arg, f.arg)
					continue
				}
				args = append(args, v)
			}
			out, errOut, code := run(t, "", append(args, "--help")...)
			if code != exitOK || !strings.HasPrefix(out, "usage: airlock "+name) {
				t.Errorf("airlock %s: the listed flag is not taken: exit %d: %s", strings.Join(args, " "), code, strings.TrimSpace(errOut))
			}
		}
	}
}

// TestEvalFlagsWork: each flag airlock help eval lists changes an
// expression's run as it says, and the job flags that do not apply to an
// expression (grants, images, other tiers' settings) are not listed.
func TestEvalFlagsWork(t *testing.T) {
	dir := t.TempDir()
	policy := filepath.Join(dir, "policy.json")
	data, err := json.Marshal(escalate.DefaultPolicy())
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(policy, data, 0o600))
	cases := map[string][]string{
		"tier":      {"--tier", "expr"},
		"situation": {"--situation", "internal"},
		"input":     {"--input", `{"a": 1}`},
		"clock":     {"--clock", "2026-01-02T15:04:05Z"},
		"seed":      {"--seed", "7"},
		"wall":      {"--wall", "5s"},
		"memory":    {"--memory", "64"},
		"output":    {"--output", "1000"},
		"steps":     {"--steps", "100000"},
		"policy":    {"--policy", policy},
		"json":      {"--json"},
	}
	var listed []string
	for _, f := range listedFlags(t, "eval") {
		listed = append(listed, f.name)
		args, ok := cases[f.name]
		if !ok {
			t.Errorf("airlock eval lists --%s, which this test does not try; add a case", f.name)
			continue
		}
		out, errOut, code := run(t, "", append(append([]string{"eval"}, args...), "1 + 1")...)
		if assert.Equal(t, exitOK, code, "eval %v: %s", args, errOut) && f.name != "json" {
			assert.Equal(t, "2\n", out, args)
		}
	}
	for _, no := range []string{"allow-read", "allow-net", "allow-spawn", "image", "file", "entry", "env", "secret", "credential", "scratch", "copy", "read-at", "process-pool", "gvisor-pool", "images", "account"} {
		assert.False(t, slices.Contains(listed, no), "airlock eval lists --%s, which no expression takes", no)
	}
	// The limits act.
	_, errOut, code := run(t, "", "eval", "--steps", "10", `map(1..1000, # * 2)`)
	assert.Equal(t, exitStopped, code, errOut)
	out, _, code := run(t, "", "eval", "--input", `{"a": 41}`, "a + 1")
	assert.Equal(t, exitOK, code)
	assert.Equal(t, "42\n", out)
}

// TestMCPWrapFlagsWork: each flag airlock help mcp-wrap lists is taken by
// a real wrapped server's start (testdata/dynamic_mcp.py on the process
// tier, in the python image), which then lists its tools; the job flags
// that do not apply to an attached command (an interpreter's, level 5's,
// the microVM's, --wall beside --max-lifetime) are not listed.
func TestMCPWrapFlagsWork(t *testing.T) {
	needWrapImage(t, "process", "python")
	dir := realTemp(t)
	script, err := os.ReadFile(filepath.Join("testdata", "dynamic_mcp.py"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "dynamic_mcp.py"), script, 0o644))
	other := realTemp(t)
	file := filepath.Join(other, "f.txt")
	require.NoError(t, os.WriteFile(file, []byte("x"), 0o600))
	key := filepath.Join(other, "key")
	require.NoError(t, os.WriteFile(key, []byte("0123456789abcdef0123456789abcdef0123\n"), 0o600))
	policy := filepath.Join(other, "tools.yaml")
	require.NoError(t, os.WriteFile(policy, []byte("default: allow\n"), 0o600))
	hosts := filepath.Join(other, "hosts")
	require.NoError(t, os.WriteFile(hosts, []byte("192.0.2.1 pinned.test\n"), 0o600))
	auth := filepath.Join(other, "auth.json")
	require.NoError(t, os.WriteFile(auth, []byte(`{"auths":{}}`), 0o600))
	cases := map[string][]string{
		"tier":          {"--tier", "process"},
		"situation":     {"--situation", "internal"},
		"memory":        {"--memory", "256"},
		"output":        {"--output", "1000000"},
		"allow-read":    {"--allow-read", other},
		"read":          {"--read", other},
		"read-at":       {"--read-at", other + "=/placed"},
		"copy":          {"--copy", other},
		"allow-net":     {"--allow-net", "example.com"},
		"scratch":       {"--scratch", "16"},
		"allow-spawn":   {"--allow-spawn"},
		"image":         {"--image", "python"},
		"secret":        {"--secret", "HOME"},
		"env":           {"--env", "A=B"},
		"file":          {"--file", file},
		"process-pool":  {"--process-pool", "1"},
		"gvisor-pool":   {"--gvisor-pool", "1"},
		"image-pool":    {"--image-pool", "process:python=1"},
		"hosts":         {"--hosts", hosts},
		"egress-log":    {"--egress-log", filepath.Join(other, "egress.log")},
		"images":        {"--images", imageDir()},
		"registry-auth": {"--registry-auth", auth},
		"policy":        {"--policy", policy},
		"output-host":   {"--output-host", "example.com"},
		"audit":         {"--audit", filepath.Join(other, "audit.log")},
		"call-timeout":  {"--call-timeout", "30s"},
		"max-result":    {"--max-result", "10000"},
		"approval-key":  {"--approval-key", key},
		"max-lifetime":  {"--max-lifetime", "1h"},
		"idle-timeout":  {"--idle-timeout", "10m"},
	}
	approving := map[string][]string{
		"approve":         {"--approve", "whoami"},
		"args":            {"--args", `{"a":1}`},
		"approval-tenant": {"--approval-tenant", "acme"},
		"approval-ttl":    {"--approval-ttl", "5m"},
	}
	server := []string{"--", "python3", filepath.Join(dir, "dynamic_mcp.py")}
	base := []string{"--tier", "process", "--image", "python", "--allow-read", dir}
	var listed []string
	for _, f := range listedFlags(t, "mcp-wrap") {
		listed = append(listed, f.name)
		if args, ok := approving[f.name]; ok {
			a := append([]string{"mcp-wrap", "--approval-key", key, "--approve", "whoami"}, args...)
			out, errOut, code := run(t, "", append(a, server...)...)
			assert.Equal(t, exitOK, code, "%v: %s", args, errOut)
			assert.NotEmpty(t, strings.TrimSpace(out), "%v: no token", args)
			continue
		}
		if f.name == "http" || f.name == "http-key" {
			continue // TestMCPWrapHTTP serves over HTTP with both
		}
		args, ok := cases[f.name]
		if !ok {
			t.Errorf("airlock mcp-wrap lists --%s, which this test does not try; add a case", f.name)
			continue
		}
		t.Run(f.name, func(t *testing.T) {
			cs := wrap(t, append(append(slices.Clone(base), args...), server...)...)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			tools, err := cs.ListTools(ctx, nil)
			require.NoError(t, err)
			assert.NotEmpty(t, tools.Tools)
		})
	}
	for _, no := range []string{"input", "entry", "steps", "clock", "seed", "wall", "credential", "account", "microvm-pool", "microvm-warm"} {
		assert.False(t, slices.Contains(listed, no), "airlock mcp-wrap lists --%s, which an attached command job does not take", no)
	}
}

// imageDir is the image store the tests use.
func imageDir() string {
	if d := os.Getenv(image.DirEnv); d != "" {
		return d
	}
	return image.DefaultDir()
}

// TestFlagGivenTwice: a flag that takes one value, given twice with
// different values, is refused in one line rather than the last silently
// winning; the same value twice, and a repeatable flag, are taken.
func TestFlagGivenTwice(t *testing.T) {
	for _, args := range [][]string{
		{"run", "--situation", "public", "--situation", "internal", "--", "true"},
		{"run", "--tier", "process", "--json", "--tier", "gvisor", "--", "true"},
		{"eval", "--memory", "64", "1", "--memory", "128"},
		{"eval", "--json", "--json=false", "1"},
		{"mcp-wrap", "--http", "127.0.0.1:1", "--http", "127.0.0.1:2", "--", "true"},
		{"serve", "--listen", "127.0.0.1:1", "--listen", "127.0.0.1:2"},
		{"tiers", "--images", "/a", "--images", "/b"},
		{"sanitize", "--html", "--html=false"},
	} {
		out, errOut, code := run(t, "", args...)
		assert.Equal(t, exitUsage, code, "%v: %s", args, errOut)
		assert.Contains(t, out+errOut, "given twice with different values", args)
		if wantsJSON(args) {
			assert.Contains(t, out, `"kind": "invalid"`, args) // --json: one Result, also for a bad flag
		} else {
			assert.Equal(t, 1, strings.Count(strings.TrimSpace(errOut), "\n")+1, "one line: %q", errOut)
		}
	}
	for _, args := range [][]string{
		{"eval", "--memory", "64", "--memory", "64", "1"},
		{"eval", "--json", "--json", "1"},
		{"eval", "--wall", "1s", "--wall", "1000ms", "1"},
		{"sanitize", "--allow", "a.example", "--allow", "b.example"},
	} {
		_, errOut, code := run(t, "", args...)
		assert.Equal(t, exitOK, code, "%v: %s", args, errOut)
	}
}

// TestErrorsArePrintable: a path or name holding a line break, a terminal
// escape or a byte that is not UTF-8, named in an error, is written
// escaped: the error stays one printable line.
func TestErrorsArePrintable(t *testing.T) {
	bad := "/no\nsuch\x1b[31m\xff"
	for _, args := range [][]string{
		{"run", "--tier", "process", "--allow-read", bad, "--", "true"},
		{"run", "--tier", "process", "--secret", "X\xff", "--", "true"},
		{"run", bad},
		{"explain", bad},
		{"mcp-wrap", "--policy", bad, "--", "true"},
		{"serve", "--config", bad},
		{"mcp", "--config", bad},
		{"replay", bad},
		{"audit", "verify", bad},
		{"proxy", "--policy", bad},
	} {
		_, errOut, code := run(t, "", args...)
		assert.NotEqual(t, exitOK, code, args)
		assert.Equal(t, 1, strings.Count(errOut, "\n"), "%q: one line: %q", args, errOut)
		assert.True(t, utf8.ValidString(errOut), "%q: not UTF-8: %q", args, errOut)
		assert.NotContains(t, errOut, "\x1b", args)
	}
}
