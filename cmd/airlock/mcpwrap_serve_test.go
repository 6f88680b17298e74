package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/airlock-sandbox/airlock/internal/mcpwrap"
	"github.com/airlock-sandbox/airlock/server"
)

// otherKey is the second tenant's key in the wrapped-server tests.
const otherKey = "ak_cli-test-key-other-0123456789abcdef012345"

type bearer struct{ key string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return http.DefaultTransport.RoundTrip(r)
}

// connectWrapped opens an MCP session with a wrapped server of serve at
// addr as the holder of key; changed, if not nil, hears the session's
// tools/list_changed notifications.
func connectWrapped(t *testing.T, addr, key, name string, changed chan<- struct{}) *mcp.ClientSession {
	t.Helper()
	opts := &mcp.ClientOptions{}
	if changed != nil {
		opts.ToolListChangedHandler = func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} }
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-agent"}, opts).Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint: "http://" + addr + "/mcp/wrapped/" + name, HTTPClient: &http.Client{Transport: bearer{key}}, MaxRetries: -1}, nil)
	require.NoError(t, err, "connecting to %s", name)
	return cs
}

// TestServeWrapped: `airlock serve` hosts a wrapped MCP server (the test's
// dynamic server, in the python image on gVisor) for two tenants. Every
// MCP session gets an instance of its own; a tenant cannot use another's
// session nor a server declared for another; a tool list change of the
// wrapped server reaches the agent's client through the policy; an idle
// instance ends with its session; calls and decisions are in the audit
// trail.
func TestServeWrapped(t *testing.T) {
	needWrapImage(t, "gvisor", "python")
	dir := realTemp(t)
	testdata := realTemp(t)
	script, err := os.ReadFile(filepath.Join("testdata", "dynamic_mcp.py"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(testdata, "dynamic_mcp.py"), script, 0o644))
	wrapped := func(name, extra string) string {
		return fmt.Sprintf(`      - name: %s
        argv: [python3, %s]
        image: python
        grants: {fs: {read: [%s]}}
        policy: {tools: {forbidden: {allow: false}, whoami: {rate_per_minute: 2}}}
%s`, name, filepath.Join(testdata, "dynamic_mcp.py"), testdata, extra)
	}
	cfg := fmt.Sprintf(`audit: audit.jsonl
shutdown_grace: 300ms
tenants:
  - name: a
    key_sha256: %s
    mcp_wrapped:
%s%s      - name: silent
        argv: [python3, -c, pass]
        image: python
  - name: b
    key_sha256: %s
    mcp_wrapped:
%s`, server.HashKey(testKey), wrapped("dyn", ""), wrapped("brief", "        idle_timeout: 1s\n"), server.HashKey(otherKey), wrapped("dyn", ""))
	path := filepath.Join(dir, "serve.yaml")
	require.NoError(t, os.WriteFile(path, []byte(cfg), 0o600))
	c := startServe(t, path)
	ctx := context.Background()

	// A wrapped server that exits without speaking MCP is the operator's
	// configuration failing: 500, its cause in the server's log, not the
	// tenant's answer.
	status, _, silent := mcpPost(t, "http://"+c.addr+"/mcp/wrapped/silent", testKey, "", guardInit)
	assert.Equal(t, http.StatusInternalServerError, status, "%s", silent)
	assert.Contains(t, silent, "airlock failed")

	changed := make(chan struct{}, 16)
	a1 := connectWrapped(t, c.addr, testKey, "dyn", changed)
	a2 := connectWrapped(t, c.addr, testKey, "dyn", nil)
	b1 := connectWrapped(t, c.addr, otherKey, "dyn", nil)
	who := map[string]string{}
	for name, cs := range map[string]*mcp.ClientSession{"a1": a1, "a2": a2, "b1": b1} {
		r := callTool(t, cs, "whoami", nil, nil)
		require.False(t, r.IsError, toolText(r))
		who[toolText(r)] = name
	}
	assert.Len(t, who, 3, "sessions shared an instance: %v", who)
	// A tool's rate is the declaration's, across the tenant's sessions:
	// a1 and a2 have used it up, b1's tenant has not.
	r := callTool(t, a2, "whoami", nil, nil)
	assert.True(t, r.IsError && strings.Contains(toolText(r), "rate"), "a third whoami of tenant a within a minute: %s", toolText(r))
	r = callTool(t, b1, "whoami", nil, nil)
	assert.False(t, r.IsError, "tenant b's second whoami: %s", toolText(r))

	// Large bodies take the tenant's large-body slots, as on /mcp: a
	// third held past a MiB at once is refused rather than read.
	var held []*io.PipeWriter
	bodies := make(chan *http.Response, 3)
	for range 3 {
		pr, pw := io.Pipe()
		held = append(held, pw)
		req, _ := http.NewRequest("POST", "http://"+c.addr+"/mcp/wrapped/dyn", pr)
		req.Header.Set("Authorization", "Bearer "+testKey)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", a2.ID())
		go func() {
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				resp = nil
			}
			bodies <- resp
		}()
		go pw.Write(append([]byte(`{"jsonrpc":"2.0","id":7,"method":"ping","params":{"_meta":{"pad":"`), make([]byte, 3<<20/2)...))
		time.Sleep(300 * time.Millisecond)
	}
	select {
	case resp := <-bodies:
		require.NotNil(t, resp)
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "a third large body at once: %s", got)
	case <-time.After(10 * time.Second):
		t.Error("three large bodies at once were all taken in")
	}
	for _, pw := range held {
		pw.CloseWithError(io.ErrUnexpectedEOF)
	}

	// b presenting a's session, or naming a server declared for a only.
	body := `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"whoami"}}`
	for _, target := range []struct{ path, session string }{{"dyn", a1.ID()}, {"brief", ""}} {
		status, _, got := mcpPost(t, "http://"+c.addr+"/mcp/wrapped/"+target.path, otherKey, target.session, body)
		if status < 400 || strings.Contains(got, "instance ") {
			t.Errorf("tenant b reached %s (session %q): %d %s", target.path, target.session, status, got)
		}
	}

	// The wrapped server's tool list grows: the agent hears of it, and
	// the new list passes the policy.
	r = callTool(t, a1, "grow", nil, nil)
	require.False(t, r.IsError, toolText(r))
	for {
		select {
		case <-changed:
		case <-time.After(time.Minute):
			t.Fatalf("no tools/list_changed reached the agent within a minute; serve:\n%s", c.log)
		}
		list, err := a1.ListTools(ctx, nil)
		require.NoError(t, err)
		names := map[string]bool{}
		for _, tool := range list.Tools {
			names[tool.Name] = true
		}
		require.False(t, names["forbidden"], "a denied tool was offered: %v", names)
		if names["extra"] {
			break
		}
	}
	r = callTool(t, a1, "extra", nil, nil)
	assert.Equal(t, "extra called", toolText(r))
	_, err = a1.CallTool(ctx, &mcp.CallToolParams{Name: "forbidden"})
	assert.Error(t, err, "a denied tool was callable")

	// An idle instance ends, and its session with it.
	brief := connectWrapped(t, c.addr, testKey, "brief", nil)
	r = callTool(t, brief, "whoami", nil, nil)
	require.False(t, r.IsError, toolText(r))
	// Without calling it (a call is activity), wait for the trail to say
	// it ended idle; its session is then gone.
	for deadline := time.Now().Add(time.Minute); ; {
		time.Sleep(200 * time.Millisecond)
		log, _ := os.ReadFile(filepath.Join(dir, "audit.jsonl"))
		if strings.Contains(string(log), mcpwrap.ErrIdle.Error()) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the idle instance did not end within a minute; audit:\n%s\nserve:\n%s", log, c.log)
		}
	}
	_, err = brief.CallTool(ctx, &mcp.CallToolParams{Name: "whoami"})
	assert.Error(t, err, "a call in a session whose instance ended idle")
	brief.Close()

	for _, cs := range []*mcp.ClientSession{a2, b1} {
		require.NoError(t, cs.Close())
	}
	// a1 is still open: stopping the server ends its instance too.
	require.NoError(t, c.cmd.Process.Signal(syscall.SIGTERM))
	if err := <-c.done; err != nil {
		t.Errorf("serve exited with %v: %s", err, c.log)
	}
	c.done <- nil // for the cleanup
	_ = a1.Close()
	if left := groupAlive(c.cmd.Process.Pid); len(left) > 0 {
		t.Errorf("processes left: %v", left)
	}
	log, err := os.ReadFile(filepath.Join(dir, "audit.jsonl"))
	require.NoError(t, err)
	for _, want := range []string{`"request":"mcp_wrapped"`, `"outcome":"call:relayed"`, `"reason":"tool forbidden: denied by policy"`, `"reason":"tool extra"`, `"outcome":"list:listed"`, mcpwrap.ErrIdle.Error()} {
		assert.Contains(t, string(log), want)
	}
}
