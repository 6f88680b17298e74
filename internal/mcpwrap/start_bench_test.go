package mcpwrap_test

import (
	"context"
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
)

// BenchmarkStartPooled compares starting a wrapped server (a small Python
// MCP server placed as a job file, so a pooled sandbox serves it) from
// gVisor's warm pool, up to its tool list, with starting the same server
// bare on the host plus the tier's pooled claim of a trivial job. The pool
// refills between iterations, outside the timing. pooled-run is the
// server itself run from the pool to its end without a client: its
// interpreter's start inside the sandbox. Medians; no assertion on the
// times.
func BenchmarkStartPooled(b *testing.B) {
	script, err := os.ReadFile(filepath.Join("..", "..", "cmd", "airlock", "testdata", "dynamic_mcp.py"))
	if err != nil {
		b.Fatal(err)
	}
	// The interpreter the sandbox runs (its root is the host's /usr), not
	// whatever wrapper a user's PATH puts first.
	const python = "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		testenv.Skipf(b, "python3: %v", err)
	}
	tier, err := gvisor.New(gvisor.NewConfig().WithPool(1, 1))
	if err != nil {
		b.Fatal(err)
	}
	defer tier.Close()
	if err := tier.Available(); err != nil {
		testenv.Skipf(b, "gVisor: %v", err)
	}
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
		hits := tier.Stats().Hits
		job := airlock.Job{Kind: airlock.KindCommand, Argv: []string{"python3", "server.py"}, Files: map[string]string{"server.py": string(script)},
			Limits: airlock.Limits{WallMS: 60_000, CPUMS: 60_000}}
		start := time.Now()
		w, err := mcpwrap.Start(ctx, tier, job, mcpwrap.Config{Argv: job.Argv}, time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		d := time.Since(start) // Start has listed the server's tools
		if tier.Stats().Hits != hits+1 {
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
