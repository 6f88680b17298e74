package mcpwrap_test

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/mcpwrap"
	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
	"github.com/airlock-sandbox/airlock/tiers/gvisor"
	"github.com/airlock-sandbox/airlock/tiers/process"
)

// benchServer is the small Python MCP server of the serve tests, placed as
// a job file (no read grant, so a pooled sandbox can serve it), and the
// host's interpreter the sandbox runs (its root is the host's /usr), not
// whatever wrapper a user's PATH puts first.
const benchPython = "/usr/bin/python3"

// pooledTier is an attaching tier with a warm pool.
type pooledTier interface {
	airlock.Tier
	airlock.Attacher
	airlock.Pooler
	Available() error
	Close() error
}

func benchServer(b *testing.B, name string) (script []byte, tier pooledTier) {
	script, err := os.ReadFile(filepath.Join("..", "..", "cmd", "airlock", "testdata", "dynamic_mcp.py"))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := os.Stat(benchPython); err != nil {
		testenv.Skipf(b, "python3: %v", err)
	}
	switch name {
	case "gvisor":
		tier, err = gvisor.New(gvisor.NewConfig().WithPool(1, 1))
	default:
		tier, err = process.New(process.NewConfig().WithPool(1))
	}
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { tier.Close() })
	if err := tier.Available(); err != nil {
		testenv.Skipf(b, "%s: %v", name, err)
	}
	return script, tier
}

// BenchmarkStartPooled compares starting a wrapped server from a tier's
// warm pool (process and gVisor), up to its tool list, with starting the same server bare on
// the host plus the tier's pooled claim of a trivial job. The pool
// refills between iterations, outside the timing. pooled-run is the
// server itself run from the pool to its end without a client: its
// interpreter's start inside the sandbox. Medians; no assertion on the
// times.
func BenchmarkStartPooled(b *testing.B) {
	for _, name := range []string{"process", "gvisor"} {
		b.Run(name, func(b *testing.B) { startPooled(b, name) })
	}
}

func startPooled(b *testing.B, name string) {
	script, tier := benchServer(b, name)
	ctx := context.Background()
	warm := func() {
		wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		if err := tier.WaitWarm(wctx); err != nil {
			b.Fatal(err)
		}
	}
	dir := b.TempDir()
	local := filepath.Join(dir, "server.py")
	python := benchPython
	if err := os.WriteFile(local, script, 0o644); err != nil {
		b.Fatal(err)
	}
	bare := func() time.Duration {
		start := time.Now()
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench"}, nil).Connect(ctx, &mcp.CommandTransport{Command: exec.Command(python, local)}, nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := cs.ListTools(ctx, nil); err != nil {
			b.Fatal(err)
		}
		d := time.Since(start)
		cs.Close()
		return d
	}
	claim := func(job airlock.Job) time.Duration {
		warm()
		start := time.Now()
		if _, err := tier.Run(ctx, job); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	trivial := airlock.Job{Kind: airlock.KindCommand, Argv: []string{"true"}}
	// The server run to its end (stdin is empty): its interpreter's start
	// inside the sandbox, without MCP.
	server := airlock.Job{Kind: airlock.KindCommand, Argv: []string{"python3", "server.py"}, Files: map[string]string{"server.py": string(script)}}
	wrapped := func() time.Duration {
		warm()
		hits := tier.PoolStats().Hits
		job := airlock.Job{Kind: airlock.KindCommand, Argv: []string{"python3", "server.py"}, Files: map[string]string{"server.py": string(script)},
			Limits: airlock.Limits{WallMS: 60_000, CPUMS: 60_000}}
		start := time.Now()
		w, err := mcpwrap.Start(ctx, tier, job, mcpwrap.Config{Argv: job.Argv}, time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		d := time.Since(start) // Start has listed the server's tools
		if tier.PoolStats().Hits != hits+1 {
			b.Fatal("the wrapped server did not start in a pooled sandbox")
		}
		w.Close()
		return d
	}
	var bares, claims, runs, wraps []time.Duration
	for b.Loop() {
		bares = append(bares, bare())
		claims = append(claims, claim(trivial))
		runs = append(runs, claim(server))
		wraps = append(wraps, wrapped())
	}
	med := func(ds []time.Duration) float64 {
		slices.Sort(ds)
		return float64(ds[len(ds)/2].Nanoseconds())
	}
	b.ReportMetric(med(bares)/1e6, "bare-ms")
	b.ReportMetric(med(claims)/1e6, "claim-ms")
	b.ReportMetric(med(runs)/1e6, "pooled-run-ms")
	b.ReportMetric(med(wraps)/1e6, "wrapped-ms")
	b.ReportMetric(med(wraps)/(med(bares)+med(claims)), "wrapped/(bare+claim)")
}

// BenchmarkRelaySandboxed splits what a relayed tools/call costs on gVisor:
// the same server and call on the host over stdio (direct), in a gVisor
// sandbox over its attached stdio with no wrapper (sandboxed), and there
// through the wrapper, whose agent side is in memory (wrapped). wrapped
// minus sandboxed is the wrapper's own share; sandboxed minus direct the
// sandbox's. Medians of single calls; no assertion on the times.
func BenchmarkRelaySandboxed(b *testing.B) {
	script, tier := benchServer(b, "gvisor")
	ctx := context.Background()
	local := filepath.Join(b.TempDir(), "server.py")
	if err := os.WriteFile(local, script, 0o644); err != nil {
		b.Fatal(err)
	}
	client := func(t mcp.Transport) *mcp.ClientSession {
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench"}, nil).Connect(ctx, t, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { cs.Close() })
		return cs
	}
	job := airlock.Job{Kind: airlock.KindCommand, Argv: []string{"python3", "server.py"}, Files: map[string]string{"server.py": string(script)},
		Limits: airlock.Limits{WallMS: 600_000, CPUMS: 600_000}}
	direct := client(&mcp.CommandTransport{Command: exec.Command(benchPython, local)})
	att, err := tier.Attach(ctx, job)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { att.Kill(); _, _ = att.Wait() })
	sandboxed := client(&mcp.IOTransport{Reader: io.NopCloser(att.Stdout()), Writer: att.Stdin()})
	w, err := mcpwrap.Start(ctx, tier, job, mcpwrap.Config{Argv: job.Argv}, time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { w.Close() })
	st, ct := mcp.NewInMemoryTransports()
	ss, err := w.Server().Connect(ctx, st, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ss.Close() })
	wrapped := client(ct)
	call := func(cs *mcp.ClientSession) time.Duration {
		start := time.Now()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "whoami"})
		if err != nil || res.IsError {
			b.Fatalf("whoami: %v %v", err, res)
		}
		return time.Since(start)
	}
	for _, cs := range []*mcp.ClientSession{direct, sandboxed, wrapped} {
		call(cs) // warm
	}
	var ds, ss2, ws []time.Duration
	for b.Loop() {
		ds = append(ds, call(direct))
		ss2 = append(ss2, call(sandboxed))
		ws = append(ws, call(wrapped))
	}
	med := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2].Nanoseconds()) / 1e3
	}
	b.ReportMetric(med(ds), "direct-µs")
	b.ReportMetric(med(ss2), "sandboxed-µs")
	b.ReportMetric(med(ws), "wrapped-µs")
	b.ReportMetric(med(ws)-med(ss2), "wrapper-µs")
}
