package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMCPWrapHTTPRefusals: what --http refuses before anything starts.
func TestMCPWrapHTTPRefusals(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "key")
	require.NoError(t, os.WriteFile(key, []byte("0123456789abcdef0123\n"), 0o600))
	loose := filepath.Join(dir, "loose")
	require.NoError(t, os.WriteFile(loose, []byte("0123456789abcdef0123\n"), 0o644))
	short := filepath.Join(dir, "short")
	require.NoError(t, os.WriteFile(short, []byte("abc\n"), 0o600))
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--http", "0.0.0.0:0", "--http-key", key}, "not a loopback address"},
		{[]string{"--http", ":8931", "--http-key", key}, "not a loopback address"},
		{[]string{"--http", "192.0.2.1:80", "--http-key", key}, "not a loopback address"},
		{[]string{"--http", "127.0.0.1"}, "want HOST:PORT"},
		{[]string{"--http", "127.0.0.1:0"}, "needs --http-key"},
		{[]string{"--http-key", key}, "is for --http"},
		{[]string{"--http", "127.0.0.1:0", "--http-key", loose}, "chmod 600"},
		{[]string{"--http", "[::1]:0", "--http-key", short}, "at least 16"},
	} {
		_, errOut, code := run(t, "", append(append([]string{"mcp-wrap"}, c.args...), "--", "true")...)
		assert.Equal(t, exitUsage, code, "%v: %s", c.args, errOut)
		assert.Contains(t, errOut, c.want, c.args)
		assert.Equal(t, 1, strings.Count(strings.TrimSpace(errOut), "\n")+1, "one line: %q", errOut)
	}
}

// TestMCPWrapHTTP: mcp-wrap serves the real server-everything (on gVisor,
// in the node image) over streamable HTTP on loopback. A request without
// the key, or with a wrong one, is refused; a loopback request naming
// another host (DNS rebinding) and a browser's cross-site request are
// refused; the Go SDK's client and the
// official Inspector list and call its tools with the key.
func TestMCPWrapHTTP(t *testing.T) {
	servers := mcpServers(t)
	needWrapImage(t, "gvisor", "node")
	const key = "wrap-http-key-6c0e5b1d2a"
	keyFile := filepath.Join(t.TempDir(), "key")
	require.NoError(t, os.WriteFile(keyFile, []byte(key+"\n"), 0o600))
	entry := filepath.Join(servers, "node_modules/@modelcontextprotocol/server-everything/dist/index.js")
	c := startChild(t, []string{envCanary + "=env-canary-7d1f"}, "airlock: MCP on http://",
		"mcp-wrap", "--http", "127.0.0.1:0", "--http-key", keyFile, "--image", "node", "--allow-read", servers, "--", "node", entry, "stdio")
	url := "http://" + c.addr // the ready line names the endpoint, HOST:PORT/mcp

	initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	status := func(auth, host string, header ...string) int {
		t.Helper()
		req, err := http.NewRequest("POST", url, strings.NewReader(initialize))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		if host != "" {
			req.Host = host
		}
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	assert.Equal(t, http.StatusUnauthorized, status("", ""))
	assert.Equal(t, http.StatusUnauthorized, status("Bearer "+key+"x", ""))
	assert.Equal(t, http.StatusUnauthorized, status("Bearer "+key[:len(key)-1], ""))
	assert.Equal(t, http.StatusForbidden, status("Bearer "+key, "attacker.example:80"))
	// A page of another site making the agent's browser post, key and all.
	assert.Equal(t, http.StatusForbidden, status("Bearer "+key, "", "Sec-Fetch-Site", "cross-site"))
	assert.Equal(t, http.StatusForbidden, status("Bearer "+key, "", "Origin", "http://attacker.example"))
	assert.Equal(t, http.StatusOK, status("Bearer "+key, ""))

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-agent"}, nil).Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint: url, HTTPClient: &http.Client{Transport: bearer{key}}, MaxRetries: -1}, nil)
	require.NoError(t, err)
	defer cs.Close()
	r := callTool(t, cs, "echo", map[string]any{"message": "over http"}, nil)
	assert.False(t, r.IsError, toolText(r))
	assert.Contains(t, toolText(r), "over http")

	target := []string{url, "--transport", "http", "--header", "Authorization: Bearer " + key}
	list, stderr := inspector(t, target, "--method", "tools/list", "--strict")
	assert.NotContains(t, stderr, "Warning")
	assert.Contains(t, toolNames(list), "echo")
	out, _ := inspector(t, target, "--method", "tools/call", "--tool-name", "echo", "--tool-arg", "message=from the inspector")
	assert.Contains(t, contentText(out), "from the inspector")
}

// TestMCPWrapInspectorStdio: the official Inspector starts mcp-wrap over
// stdio, as an MCP host would, lists the wrapped server's tools with its
// schema checks on and calls one, gets a prompt and reads a resource.
func TestMCPWrapInspectorStdio(t *testing.T) {
	servers := mcpServers(t)
	needWrapImage(t, "gvisor", "node")
	entry := filepath.Join(servers, "node_modules/@modelcontextprotocol/server-everything/dist/index.js")
	target := []string{os.Args[0], "mcp-wrap", "--image", "node", "--allow-read", servers, "--", "node", entry, "stdio"}
	child := []string{"-e", "AIRLOCK_CLI_CHILD=1"}
	list, stderr := inspector(t, target, append(child, "--method", "tools/list", "--strict")...)
	assert.NotContains(t, stderr, "Warning")
	assert.Contains(t, toolNames(list), "echo")
	out, _ := inspector(t, target, append(child, "--method", "tools/call", "--tool-name", "echo", "--tool-arg", "message=through stdio")...)
	assert.Contains(t, contentText(out), "through stdio")

	prompt, _ := inspector(t, target, append(child, "--method", "prompts/get", "--prompt-name", "args-prompt", "--prompt-args", "city=Lyon")...)
	msgs, _ := prompt["messages"].([]any)
	require.NotEmpty(t, msgs, "prompts/get: %v", prompt)
	assert.Contains(t, fmt.Sprint(msgs[0]), "Lyon")
	const doc = "demo://resource/static/document/architecture.md"
	res, _ := inspector(t, target, append(child, "--method", "resources/read", "--uri", doc)...)
	contents, _ := res["contents"].([]any)
	require.Len(t, contents, 1, "resources/read: %v", res)
	assert.Equal(t, doc, contents[0].(map[string]any)["uri"])
	assert.NotEmpty(t, contents[0].(map[string]any)["text"])
}

// toolNames are the names in an Inspector tools/list answer.
func toolNames(list map[string]any) []string {
	var names []string
	tools, _ := list["tools"].([]any)
	for _, tool := range tools {
		if m, ok := tool.(map[string]any); ok {
			names = append(names, m["name"].(string))
		}
	}
	return names
}

// contentText is the text of an Inspector tools/call answer's content.
func contentText(out map[string]any) string {
	var s strings.Builder
	content, _ := out["content"].([]any)
	for _, c := range content {
		if m, ok := c.(map[string]any); ok && m["type"] == "text" {
			s.WriteString(m["text"].(string))
		}
	}
	return s.String()
}
