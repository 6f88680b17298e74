package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/airlock-sandbox/airlock/approve"
	"github.com/airlock-sandbox/airlock/internal/mcpwrap"
	"github.com/airlock-sandbox/airlock/internal/testing/syncbuf"
	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
)

// The mcp-wrap tests run the CLI in a child process (this test binary with
// AIRLOCK_CLI_CHILD=1) as an agent's client would, and drive it with the
// Go SDK's client over its stdio. The wrapped servers run on gVisor.

// envCanary is a variable of the wrapper's own environment: a wrapped
// server must never see it.
const envCanary = "AIRLOCK_TEST_ENV_CANARY"

// needWrapImage skips (fails under CI) unless the tier runs here with the
// named image built (scripts/setup-images.sh).
func needWrapImage(t *testing.T, tier, image string) {
	t.Helper()
	_, errOut, code := run(t, "", "run", "--tier", tier, "--image", image, "--", "true")
	if code != exitOK {
		testenv.Skipf(t, "%s with the %s image is unavailable here: %s", tier, image, strings.TrimSpace(errOut))
	}
}

// mcpServers returns the real directory of the reference servers that
// scripts/setup-mcpservers.sh installs.
func mcpServers(t *testing.T) string {
	t.Helper()
	dir, err := mcpServersDir()
	if err == nil {
		_, err = os.Stat(filepath.Join(dir, "version"))
	}
	if err != nil {
		testenv.Skipf(t, "reference MCP servers are not installed (scripts/setup-mcpservers.sh): %v", err)
	}
	return dir
}

// mcpServersDir is the servers' directory as an absolute real path (a read
// grant names one).
func mcpServersDir() (string, error) {
	dir, err := filepath.Abs(filepath.Join("..", "..", ".tools", "mcpservers"))
	if err != nil {
		return "", err
	}
	return filepath.EvalSymlinks(dir)
}

// realTemp is a temporary directory by its real path (read grants are
// never through a link).
func realTemp(t *testing.T) string {
	t.Helper()
	d, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	return d
}

// wrap starts `airlock mcp-wrap args...` and connects the SDK's client to
// it; the session is closed, and the child waited for, when the test ends.
func wrap(t testing.TB, args ...string) *mcp.ClientSession {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"mcp-wrap"}, args...)...)
	cmd.Env = append(os.Environ(), "AIRLOCK_CLI_CHILD=1", envCanary+"=env-canary-7d1f")
	stderr := &syncbuf.Buffer{}
	cmd.Stderr = stderr
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-agent"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("mcp-wrap: %v\nstderr: %s", err, stderr.String())
	}
	t.Cleanup(func() {
		if err := cs.Close(); err != nil {
			t.Logf("closing mcp-wrap: %v\nstderr: %s", err, stderr.String())
		}
	})
	return cs
}

func toolText(r *mcp.CallToolResult) string {
	var s strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			s.WriteString(tc.Text)
		}
	}
	return s.String()
}

func callTool(t testing.TB, cs *mcp.ClientSession, name string, args any, meta mcp.Meta) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args, Meta: meta})
	require.NoError(t, err, name)
	return res
}

// TestMCPWrapFilesystem: the real @modelcontextprotocol/server-filesystem,
// on gVisor in the node image, lists its tools and reads a file of the
// granted directory. It is told to serve a second, ungranted directory
// holding a host canary: inside the sandbox that directory does not
// exist, so the canary is not readable through its tools and the server's
// own view holds the granted directory only.
func TestMCPWrapFilesystem(t *testing.T) {
	servers := mcpServers(t)
	needWrapImage(t, "gvisor", "node")
	data, outside := realTemp(t), realTemp(t)
	require.NoError(t, os.WriteFile(filepath.Join(data, "hello.txt"), []byte("hello from the granted directory\n"), 0o644))
	canary := filepath.Join(outside, "canary.txt")
	require.NoError(t, os.WriteFile(canary, []byte("host-canary-93af\n"), 0o644))
	audit := filepath.Join(realTemp(t), "audit.jsonl")

	cs := wrap(t, "--image", "node", "--allow-read", servers, "--allow-read", data, "--audit", audit, "--",
		"node", filepath.Join(servers, "node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"), data, outside)
	ctx := context.Background()
	list, err := cs.ListTools(ctx, nil)
	require.NoError(t, err)
	names := map[string]bool{}
	for _, tool := range list.Tools {
		names[tool.Name] = true
	}
	require.True(t, names["read_text_file"], "tools: %v", names)

	r := callTool(t, cs, "read_text_file", map[string]any{"path": filepath.Join(data, "hello.txt")}, nil)
	assert.False(t, r.IsError, toolText(r))
	assert.Contains(t, toolText(r), "hello from the granted directory")

	r = callTool(t, cs, "read_text_file", map[string]any{"path": canary}, nil)
	assert.True(t, r.IsError, toolText(r))
	assert.NotContains(t, toolText(r), "host-canary-93af")
	// The server was told to serve outside too, but inside the sandbox
	// that directory does not exist: its own view holds data only.
	r = callTool(t, cs, "list_allowed_directories", nil, nil)
	assert.Contains(t, toolText(r), data)
	assert.NotContains(t, toolText(r), outside)

	log, err := os.ReadFile(audit)
	require.NoError(t, err)
	assert.Contains(t, string(log), `"event":"start"`)
	assert.Contains(t, string(log), `"tool":"read_text_file","decision":"relayed"`)
}

// origin is the granted host's listener (behind the egress gateway) and a
// loopback listener no sandbox may reach.
type origin struct {
	mu       sync.Mutex
	requests []string // METHOD PATH?QUERY
	loopback int      // connections the loopback listener accepted
}

func (o *origin) seen() (reqs []string, loopback int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.requests...), o.loopback
}

// TestMCPWrapHostile: a hostile server (testdata/hostile_mcp.py, in the
// python image) tries at start-up and in its tools to read a host canary
// file and the wrapper's environment, to reach a loopback listener of the
// host and the metadata address, to resolve a name carrying data (DNS
// exfiltration), and to POST to a host granted GET only;
// it answers with a markdown image to another host, floods, and never
// answers one call. Each attempt is contained, the stuck call gets a clear
// error, and the wrapper keeps answering. A tool marked approval: true is
// relayed only with a token for exactly its arguments. It runs on gVisor
// and on the process tier (as internal: --tier names it).
func TestMCPWrapHostile(t *testing.T) {
	for _, tier := range []string{"gvisor", "process"} {
		t.Run(tier, func(t *testing.T) { testMCPWrapHostile(t, tier) })
	}
}

func testMCPWrapHostile(t *testing.T, tier string) {
	needWrapImage(t, tier, "python")
	o := &origin{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.mu.Lock()
		o.requests = append(o.requests, r.Method+" "+r.URL.RequestURI())
		o.mu.Unlock()
		fmt.Fprintln(w, "ok")
	}))
	defer srv.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			o.mu.Lock()
			o.loopback++
			o.mu.Unlock()
			c.Close()
		}
	}()
	dir, testdata := realTemp(t), realTemp(t)
	script, err := os.ReadFile(filepath.Join("testdata", "hostile_mcp.py"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(testdata, "hostile_mcp.py"), script, 0o644))
	canary := filepath.Join(dir, "canary.txt")
	require.NoError(t, os.WriteFile(canary, []byte("host-canary-5e2b"), 0o644))
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	hosts := filepath.Join(dir, "hosts")
	require.NoError(t, os.WriteFile(hosts, []byte("127.0.0.1 origin.test\n"), 0o644))
	key := filepath.Join(dir, "approval.key")
	require.NoError(t, os.WriteFile(key, []byte(strings.Repeat("k", 32)), 0o600))
	policy := filepath.Join(dir, "policy.yaml")
	require.NoError(t, os.WriteFile(policy, []byte("tools:\n  echo:\n    approval: true\n"), 0o644))
	audit := filepath.Join(dir, "audit.jsonl")
	argv := []string{"python3", filepath.Join(testdata, "hostile_mcp.py"), canary, envCanary,
		fmt.Sprint(ln.Addr().(*net.TCPAddr).Port), fmt.Sprintf("http://origin.test:%d", port)}
	flags := []string{"--tier", tier, "--image", "python", "--allow-read", testdata, "--hosts", hosts,
		"--allow-net", fmt.Sprintf("origin.test:%d=GET", port), "--policy", policy, "--approval-key", key,
		"--output-host", "docs.test", "--call-timeout", "5s", "--max-result", "65536", "--audit", audit}
	cs := wrap(t, append(append(flags, "--"), argv...)...)

	for _, tool := range []string{"startup", "probe"} {
		report := toolText(callTool(t, cs, tool, nil, nil))
		t.Logf("%s:\n%s", tool, report)
		assert.NotContains(t, report, "host-canary-5e2b", tool)
		assert.Contains(t, report, "file: refused", tool)
		assert.Contains(t, report, "env: absent", tool)
		assert.Contains(t, report, "loopback: refused", tool)
		assert.Contains(t, report, "dns: refused", tool)
		assert.Contains(t, report, "metadata-direct: refused", tool)
		assert.Contains(t, report, "metadata-proxy: refused", tool)
		assert.Contains(t, report, "granted-post: refused", tool)
		assert.Contains(t, report, "granted-get: status 200", tool)
	}
	reqs, loopback := o.seen()
	assert.Zero(t, loopback, "the host's loopback listener was reached")
	assert.Len(t, reqs, 2, "the granted host saw %v", reqs)
	for _, r := range reqs {
		assert.Equal(t, "GET /get?env=absent", r)
	}

	r := callTool(t, cs, "exfil", map[string]any{"secret": "s3cr3t"}, nil)
	assert.NotContains(t, toolText(r), "evil.test")
	assert.NotContains(t, toolText(r), "s3cr3t")
	assert.Contains(t, toolText(r), "http://docs.test/ok")

	r = callTool(t, cs, "flood", nil, nil)
	assert.Contains(t, toolText(r), "result truncated at 65536 bytes")
	assert.Less(t, len(toolText(r)), 65536+200)

	r = callTool(t, cs, "hang", nil, nil)
	assert.True(t, r.IsError)
	assert.Contains(t, toolText(r), "did not answer hang within 5s")

	// approval: true — only with a token for exactly these arguments.
	args := map[string]any{"path": "/x", "n": 1}
	r = callTool(t, cs, "echo", args, nil)
	assert.True(t, r.IsError)
	assert.Contains(t, toolText(r), approve.Required)
	tok, errOut, code := run(t, "", append([]string{"mcp-wrap", "--approval-key", key, "--approve", "echo", "--args", `{"n": 1, "path": "/x"}`, "--"}, argv...)...)
	require.Equal(t, exitOK, code, errOut)
	meta := mcp.Meta{mcpwrap.ApprovalMeta: strings.TrimSpace(tok)}
	r = callTool(t, cs, "echo", args, meta)
	assert.False(t, r.IsError, toolText(r))
	assert.Equal(t, `echo {"n": 1, "path": "/x"}`, toolText(r))
	r = callTool(t, cs, "echo", map[string]any{"path": "/y", "n": 1}, meta)
	assert.True(t, r.IsError)
	assert.Contains(t, toolText(r), approve.Stale)

	log, err := os.ReadFile(audit)
	require.NoError(t, err)
	var decisions []string
	for _, line := range strings.Split(strings.TrimSpace(string(log)), "\n") {
		var rec struct{ Tool, Decision string }
		require.NoError(t, json.Unmarshal([]byte(line), &rec))
		if rec.Decision != "" && rec.Decision != "listed" {
			decisions = append(decisions, rec.Tool+":"+rec.Decision)
		}
	}
	assert.Contains(t, decisions, "hang:timeout")
	assert.Contains(t, decisions, "echo:approval_required")
	assert.Contains(t, decisions, "echo:approval_stale")
	assert.Contains(t, decisions, "echo:relayed")
}

// BenchmarkMCPWrapRelay compares a tools/call of server-everything's echo
// relayed by mcp-wrap (the server in the node image, on the process tier's
// container level and on gVisor) with the same call to the same server run
// directly on the host over stdio, and reports the time the relay adds and
// the ratio. No assertion on the times.
func BenchmarkMCPWrapRelay(b *testing.B) {
	dir, err := mcpServersDir()
	if err != nil {
		testenv.Skipf(b, "reference MCP servers are not installed: %v", err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Skipf(b, "node is not installed: %v", err)
	}
	entry := filepath.Join(dir, "node_modules/@modelcontextprotocol/server-everything/dist/index.js")
	ctx := context.Background()
	measure := func(b *testing.B, cs *mcp.ClientSession, n int) time.Duration {
		start := time.Now()
		for range n {
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "hi"}})
			if err != nil || res.IsError {
				b.Fatalf("echo: %v %v", err, res)
			}
		}
		return time.Since(start)
	}
	for _, tier := range []string{"process", "gvisor"} {
		b.Run(tier, func(b *testing.B) {
			var out, errb strings.Builder
			if code := Run(ctx, []string{"run", "--tier", tier, "--image", "node", "--", "true"}, strings.NewReader(""), &out, &errb); code != exitOK {
				testenv.Skipf(b, "%s with the node image is unavailable here: %s", tier, errb.String())
			}
			direct, err := mcp.NewClient(&mcp.Implementation{Name: "bench"}, nil).Connect(ctx, &mcp.CommandTransport{Command: exec.Command(node, entry, "stdio")}, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer direct.Close()
			wrapped := wrap(b, "--tier", tier, "--image", "node", "--allow-read", dir, "--", "node", entry, "stdio")
			measure(b, direct, 3) // warm both
			measure(b, wrapped, 3)
			b.ResetTimer()
			d := measure(b, direct, b.N)
			w := measure(b, wrapped, b.N)
			b.ReportMetric(float64(d.Nanoseconds())/float64(b.N), "direct-ns/call")
			b.ReportMetric(float64(w.Nanoseconds())/float64(b.N), "wrapped-ns/call")
			b.ReportMetric(float64((w-d).Nanoseconds())/float64(b.N), "added-ns/call")
			b.ReportMetric(float64(w)/float64(d), "wrapped/direct")
		})
	}
}

// TestMCPWrapRefusals: what mcp-wrap refuses before anything runs.
func TestMCPWrapRefusals(t *testing.T) {
	_, errOut, code := run(t, "", "mcp-wrap")
	assert.Equal(t, exitUsage, code, errOut)
	_, errOut, code = run(t, "", "mcp-wrap", "--approve", "x", "--", "true")
	assert.Equal(t, exitUsage, code, errOut)
	assert.Contains(t, errOut, "needs --approval-key")
	bad := filepath.Join(t.TempDir(), "p.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("tools: {x: {nope: 1}}\n"), 0o600))
	_, errOut, code = run(t, "", "mcp-wrap", "--policy", bad, "--", "true")
	assert.Equal(t, exitUsage, code, errOut)
	_, errOut, code = run(t, "", "mcp-wrap", "--tier", "starlark", "--", "true")
	assert.Equal(t, exitNotAdmitted, code, errOut)
	// Values out of range, and --approve's flags without it, which would
	// otherwise be ignored, are one line naming the flag.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--call-timeout", "-1s"}, "call-timeout: want a duration above 0"},
		{[]string{"--call-timeout", "0s"}, "call-timeout: want a duration above 0"},
		{[]string{"--max-result", "0"}, "max-result: want a number of bytes above 0"},
		{[]string{"--max-lifetime", "0s"}, "max-lifetime: want a lifetime of at least 1s"},
		{[]string{"--idle-timeout", "-1s"}, "idle-timeout: want 0 (never)"},
		{[]string{"--args", `{"a":1}`}, "args: is for --approve TOOL"},
		{[]string{"--approval-tenant", "acme"}, "approval-tenant: is for --approve TOOL"},
		{[]string{"--approval-ttl", "5m"}, "approval-ttl: is for --approve TOOL"},
		{[]string{"--approve", "x", "--approval-ttl", "-5m"}, "approval-ttl: want a duration above 0"},
		{nil, "takes the server's command after --"},
	} {
		args := append(append([]string{"mcp-wrap"}, c.args...), "--", "true")
		if c.args == nil {
			args = []string{"mcp-wrap", "--"}
		}
		_, errOut, code = run(t, "", args...)
		assert.Equal(t, exitUsage, code, "%v: %s", c.args, errOut)
		assert.Contains(t, errOut, c.want, c.args)
		assert.Equal(t, 1, strings.Count(errOut, "\n"), "one line: %q", errOut)
	}
}

// TestMCPWrapNotMCP: a wrapped command that exits without speaking MCP is
// reported with how it ended, not as an error of nothing.
func TestMCPWrapNotMCP(t *testing.T) {
	needProcess(t)
	for _, c := range []struct {
		argv []string
		want string
	}{
		{[]string{"true"}, "(it exited with status 0)"},
		{[]string{"sh", "-c", "exit 3"}, "(it exited with status 3)"},
	} {
		_, errOut, code := run(t, "", append([]string{"mcp-wrap", "--tier", "process", "--image", "host", "--allow-spawn", "--"}, c.argv...)...)
		assert.Equal(t, exitFailed, code, "a server that speaks no MCP failed, not airlock: %s", errOut)
		assert.Contains(t, errOut, "the wrapped server did not start an MCP session", c.argv)
		assert.Contains(t, errOut, c.want, c.argv)
		assert.NotContains(t, errOut, "<nil>", c.argv)
	}
}

// TestMCPWrapArgPolicy: the real server-filesystem, on gVisor, serves a
// granted directory holding a canary outside the policy's root (data/);
// the policy confines its path arguments to data/ and refuses key files.
// Every attack is refused by the wrapper ("airlock: " results) before the
// server sees it, and no canary reaches the agent; calls inside the root
// are relayed.
func TestMCPWrapArgPolicy(t *testing.T) {
	servers := mcpServers(t)
	needWrapImage(t, "gvisor", "node")
	grant := realTemp(t)
	data := filepath.Join(grant, "data")
	write := func(name, body string) {
		t.Helper()
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(grant, name)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(grant, name), []byte(body), 0o644))
	}
	write("data/hello.txt", "hello from the root\n")
	write("data/sub/note.txt", "a note\n")
	write("data/.ssh/id_rsa", "ssh-canary-41c9\n")
	write("data/key.pem", "pem-canary-0b7e\n")
	write("secret.txt", "outside-canary-d25a\n")
	write("x/hello.txt", "outer-hello-canary-8f1c\n")
	require.NoError(t, os.Symlink("..", filepath.Join(data, "up")))                                            // relative, to the grant
	require.NoError(t, os.Symlink(filepath.Join(grant, "secret.txt"), filepath.Join(data, "abs")))             // absolute, out of data
	require.NoError(t, os.Symlink(filepath.Join(grant, "x"), filepath.Join(data, "x")))                        // a directory out of data
	require.NoError(t, os.Symlink(filepath.Join(grant, "secret.txt"), filepath.Join(data, "caf\u0065\u0301"))) // a decomposed name
	policy := filepath.Join(realTemp(t), "policy.yaml")
	require.NoError(t, os.WriteFile(policy, []byte(fmt.Sprintf(`roots: [%s]
path_args: [path, paths, source, destination]
refuse:
  "*": ["*.pem"]
tools:
  read_text_file:
    refuse: {path: ["**/.ssh/**"]}
`, data)), 0o600))
	audit := filepath.Join(realTemp(t), "audit.jsonl")
	// The server itself is told to serve the whole grant: only the
	// wrapper's policy keeps it to data/.
	cs := wrap(t, "--image", "node", "--allow-read", servers, "--allow-read", grant, "--policy", policy, "--audit", audit, "--",
		"node", filepath.Join(servers, "node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"), grant)

	canaries := []string{"ssh-canary-41c9", "pem-canary-0b7e", "outside-canary-d25a", "outer-hello-canary-8f1c"}
	for _, c := range []struct {
		name, tool string
		args       map[string]any
	}{
		{"traversal", "read_text_file", map[string]any{"path": data + "/../secret.txt"}},
		{"deep-traversal", "read_text_file", map[string]any{"path": data + "/sub/../../secret.txt"}},
		{"absolute-outside-root", "read_text_file", map[string]any{"path": filepath.Join(grant, "secret.txt")}},
		{"absolute-outside-grant", "read_text_file", map[string]any{"path": "/etc/passwd"}},
		{"root-prefix", "read_text_file", map[string]any{"path": data + "-other/x"}},
		{"relative", "read_text_file", map[string]any{"path": "../secret.txt"}},
		{"home", "read_text_file", map[string]any{"path": "~/secret.txt"}},
		{"file-uri", "read_text_file", map[string]any{"path": "file://" + grant + "/secret.txt"}},
		{"link-relative", "read_text_file", map[string]any{"path": data + "/up/secret.txt"}},
		{"link-absolute", "read_text_file", map[string]any{"path": data + "/abs"}},
		{"link-then-dotdot", "read_text_file", map[string]any{"path": data + "/x/../hello.txt"}},
		{"link-unicode-equivalent", "read_text_file", map[string]any{"path": data + "/caf\u00e9"}},
		{"percent-encoded", "read_text_file", map[string]any{"path": data + "/%2e%2e/secret.txt"}},
		{"backslash", "read_text_file", map[string]any{"path": data + `/sub\..\..\secret.txt`}},
		{"nul", "read_text_file", map[string]any{"path": data + "/hello.txt\x00"}},
		{"newline", "read_text_file", map[string]any{"path": data + "/sub\n/x"}},
		{"trailing-quote", "list_directory", map[string]any{"path": data + "/..'"}},
		{"trailing-space", "list_directory", map[string]any{"path": data + "/.. "}},
		{"not-a-string", "read_text_file", map[string]any{"path": 7}},
		{"list-one-outside", "read_multiple_files", map[string]any{"paths": []string{data + "/hello.txt", grant + "/secret.txt"}}},
		{"move-out", "move_file", map[string]any{"source": data + "/hello.txt", "destination": grant + "/moved.txt"}},
		{"refused-ssh", "read_text_file", map[string]any{"path": data + "/.ssh/id_rsa"}},
		{"refused-ssh-dotdot", "read_text_file", map[string]any{"path": data + "/sub/../.ssh/id_rsa"}},
		{"refused-pem", "read_text_file", map[string]any{"path": data + "/key.pem"}},
		{"refused-pem-any-tool", "get_file_info", map[string]any{"path": data + "/key.pem"}},
		{"refused-pem-any-arg", "search_files", map[string]any{"path": data, "pattern": "key.pem"}},
		{"refused-pem-encoded", "search_files", map[string]any{"path": data, "pattern": "key%2epem"}},
		{"refused-pem-fullwidth", "search_files", map[string]any{"path": data, "pattern": "key\uff0epem"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := callTool(t, cs, c.tool, c.args, nil)
			got := toolText(r)
			assert.True(t, r.IsError, got)
			assert.True(t, strings.HasPrefix(got, "airlock: tool "+c.tool+": argument "), "not refused by the wrapper: %q", got)
			for _, canary := range canaries {
				assert.NotContains(t, got, canary)
			}
		})
	}
	for _, c := range []struct {
		name, tool, want string
		args             map[string]any
	}{
		{"inside", "read_text_file", "hello from the root", map[string]any{"path": data + "/hello.txt"}},
		{"dotdot-inside", "read_text_file", "hello from the root", map[string]any{"path": data + "/sub/../hello.txt"}},
		{"list-inside", "read_multiple_files", "a note", map[string]any{"paths": []string{data + "/hello.txt", data + "/sub/note.txt"}}},
		{"root-itself", "list_directory", "hello.txt", map[string]any{"path": data}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := callTool(t, cs, c.tool, c.args, nil)
			assert.False(t, r.IsError, toolText(r))
			assert.Contains(t, toolText(r), c.want)
		})
	}
	log, err := os.ReadFile(audit)
	require.NoError(t, err)
	assert.Contains(t, string(log), `"tool":"read_text_file","decision":"denied","reason":"tool read_text_file: argument path: `)
}
