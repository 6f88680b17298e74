package mcpwrap_test

import (
	"context"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock/internal/mcpwrap"
)

// BenchmarkRelay measures what the wrapper itself adds to a tools/call:
// the same echo tool of a real go-sdk server called directly and through
// the wrapper, both over in-memory transports (no sandbox, no pipes).
func BenchmarkRelay(b *testing.B) {
	ctx := context.Background()
	connect := func(srv *mcp.Server) *mcp.ClientSession {
		st, ct := mcp.NewInMemoryTransports()
		ss, err := srv.Connect(ctx, st, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { ss.Close() })
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "agent"}, nil).Connect(ctx, ct, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { cs.Close() })
		return cs
	}
	up, upT := upstream(b, nil, nil)
	direct := connect(up)
	w, err := mcpwrap.Connect(ctx, mcpwrap.Config{Argv: []string{"x"}}, upT)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	wrapped := connect(w.Server())
	call := func(cs *mcp.ClientSession, n int) time.Duration {
		start := time.Now()
		for range n {
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "hi"}})
			if err != nil || res.IsError {
				b.Fatalf("echo: %v %v", err, res)
			}
		}
		return time.Since(start)
	}
	call(direct, 3)
	call(wrapped, 3)
	b.ResetTimer()
	d := call(direct, b.N)
	wd := call(wrapped, b.N)
	b.ReportMetric(float64(d.Nanoseconds())/float64(b.N), "direct-ns/call")
	b.ReportMetric(float64(wd.Nanoseconds())/float64(b.N), "wrapped-ns/call")
	b.ReportMetric(float64((wd-d).Nanoseconds())/float64(b.N), "added-ns/call")
}
