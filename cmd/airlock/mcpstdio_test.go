//go:build !lean

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testing/syncbuf"
	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
)

// A line of the stdio transport that the SDK cannot take as a message is
// answered with a JSON-RPC error and the session goes on: a model that
// writes one bad call (arguments nested too deep, a file too big) must not
// take the agent's tools away. A call as large as the HTTP transport takes
// is taken over stdio too.
func TestMCPStdioSurvivesBadLines(t *testing.T) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	var errb bytes.Buffer
	go func() {
		done <- Run(ctx, []string{"mcp"}, inR, outW, &errb)
		outW.Close()
	}()
	out := bufio.NewReaderSize(outR, 1<<20)
	send := func(line string) {
		t.Helper()
		if _, err := io.WriteString(inW, line+"\n"); err != nil {
			t.Fatalf("writing %.80s: %v (%s)", line, err, errb.String())
		}
	}
	answer := func() map[string]any {
		t.Helper()
		line, err := out.ReadBytes('\n')
		if err != nil {
			t.Fatalf("reading: %v (stderr: %s)", err, errb.String())
		}
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		return m
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`)
	answer()
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	deep := strings.Repeat("[", 1100) + "1" + strings.Repeat("]", 1100)
	call := func(id int, input string) string {
		return `{"jsonrpc":"2.0","id":` + string(rune('0'+id)) + `,"method":"tools/call","params":{"name":"evaluate_expression","arguments":{"expression":"len(a)","input":{"a":` + input + `}}}}`
	}
	huge := `"` + strings.Repeat("x", 40<<20) + `"`
	for _, bad := range []string{call(2, deep), "not json", `{"jsonrpc":"2.0","id":3,"method":"ping"} {}`, `[{"jsonrpc":"2.0","id":4,"method":"ping"}]`, call(5, huge)} {
		send(bad)
		if m := answer(); m["error"] == nil {
			t.Errorf("%.60s: %v", bad, m)
		}
	}
	// 17 MiB: above the SDK's own default line bound, below the job bound.
	send(call(6, `"`+strings.Repeat("y", 17<<20)+`"`))
	if m := answer(); !strings.Contains(toJSON(m), `"value":17825792`) {
		t.Errorf("a 17 MiB call: %.300s", toJSON(m))
	}
	send(call(7, `"ok"`))
	if m := answer(); !strings.Contains(toJSON(m), `"value":2`) {
		t.Errorf("the session did not go on: %.300s", toJSON(m))
	}
	inW.Close()
	if code := <-done; code != exitOK {
		t.Errorf("mcp exited %d: %s", code, errb.String())
	}
}

func toJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// mcp-wrap's stdio is the agent's too: a line the SDK cannot take is
// answered with an error and the wrapped server's tools stay offered.
// The wrapped server runs on the process tier, on the host's system.
func TestMCPWrapStdioSurvivesBadLines(t *testing.T) {
	server, err := filepath.Abs(filepath.Join("testdata", "dynamic_mcp.py"))
	if err != nil {
		t.Fatal(err)
	}
	server, _ = filepath.EvalSymlinks(server)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	errb := &syncbuf.Buffer{}
	go func() {
		done <- Run(ctx, []string{"mcp-wrap", "--tier", "process", "--allow-read", filepath.Dir(server), "--", "python3", server}, inR, outW, errb)
		outW.Close()
	}()
	out := bufio.NewReaderSize(outR, 1<<20)
	send := func(line string) {
		t.Helper()
		if _, err := io.WriteString(inW, line+"\n"); err != nil {
			t.Fatalf("writing %.80s: %v (%s)", line, err, errb.String())
		}
	}
	answer := func() map[string]any {
		t.Helper()
		line, err := out.ReadBytes('\n')
		if err != nil {
			if strings.Contains(errb.String(), "not admitted") || strings.Contains(errb.String(), "unavailable") {
				testenv.Skipf(t, "the process tier cannot run the server here: %s", errb.String())
			}
			t.Fatalf("reading: %v (stderr: %s)", err, errb.String())
		}
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		return m
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`)
	answer()
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	call := func(id int, args string) string {
		return `{"jsonrpc":"2.0","id":` + string(rune('0'+id)) + `,"method":"tools/call","params":{"name":"whoami","arguments":` + args + `}}`
	}
	deep := strings.Repeat("[", 1100) + "1" + strings.Repeat("]", 1100)
	huge := `{"a":"` + strings.Repeat("x", 20<<20) + `"}`
	for _, bad := range []string{call(2, `{"a":`+deep+`}`), "not json", `{"jsonrpc":"2.0","id":3,"method":"ping"} {}`, `[{"jsonrpc":"2.0","id":4,"method":"ping"}]`, call(5, huge)} {
		send(bad)
		if m := answer(); m["error"] == nil {
			t.Errorf("%.60s: %v", bad, m)
		}
	}
	send(call(7, `{}`))
	if m := answer(); !strings.Contains(toJSON(m), "instance ") {
		t.Errorf("the session did not go on: %.300s (stderr: %s)", toJSON(m), errb.String())
	}
	inW.Close()
	if code := <-done; code != exitOK {
		t.Errorf("mcp-wrap exited %d: %s", code, errb.String())
	}
}
