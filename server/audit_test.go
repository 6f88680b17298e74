package server_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
	"github.com/airlock-sandbox/airlock/internal/tierset"
	"github.com/airlock-sandbox/airlock/internal/tools"
	"github.com/airlock-sandbox/airlock/server"
)

func TestAuditTrailAndReplay(t *testing.T) {
	f := newFixture(t)
	jobs := []string{
		`{"kind":"starlark","code":"result = [random.randint(1, 1000000) for i in range(8)] + [time.now().unix]"}`,
		`{"kind":"expr","code":"now().Unix() + x","input":{"x":1}}`,
		`{"kind":"starlark","code":"print('out')\nfail('boom')"}`,
	}
	for _, j := range jobs {
		if r := f.do("POST", "/v1/run", keyA, j); r.status != 200 {
			t.Fatalf("%s: %d %s", j, r.status, r.body)
		}
	}
	lines := f.audit.Lines()
	if len(lines) != len(jobs) {
		t.Fatalf("%d audit lines for %d runs", len(lines), len(jobs))
	}
	tiers, err := tierset.Build(tierset.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tierset.Close(tiers)
	for i, line := range lines {
		rec, err := server.ParseRecord([]byte(line))
		if err != nil {
			t.Fatal(err)
		}
		if rec.Tenant != "a" || len(rec.Digest) != 64 || rec.Tier == "" || len(rec.Decision) == 0 ||
			rec.Clock.IsZero() || rec.Seed == 0 || rec.Limits.WallMS == 0 || rec.Output == "" || rec.Job == nil {
			t.Errorf("record %d lacks fields: %s", i, line)
		}
		res, match, err := server.Replay(context.Background(), rec, tiers)
		if err != nil || !match {
			t.Errorf("replay of record %d: match=%v err=%v result=%+v", i, match, err, res)
		}
		// A record whose output was different does not match.
		rec.Output = strings.Repeat("0", 64)
		if _, match, _ := server.Replay(context.Background(), rec, tiers); match {
			t.Errorf("record %d matches a wrong output digest", i)
		}
		// Another seed gives other random numbers.
		if i == 0 {
			rec2, _ := server.ParseRecord([]byte(line))
			rec2.Seed++
			if _, match, _ := server.Replay(context.Background(), rec2, tiers); match {
				t.Error("the seed does not matter to the replay")
			}
		}
	}
	if rec, _ := server.ParseRecord([]byte(lines[2])); rec.Outcome != "error_runtime" || !strings.Contains(rec.Error, "boom") {
		t.Errorf("failed run's record: %+v", rec)
	}
}

func TestAuditRedactsSecretsAndRefusesReplay(t *testing.T) {
	f := newFixture(t, func(c *server.Config) { c.Approvals = nil })
	// Credentials need an approval under the default approval policy; the
	// refusal is not a run, so it is not audited.
	r := f.do("POST", "/v1/run", keyA, `{"kind":"expr","code":"1","grants":{"secrets":{"TOKEN":"hunter2-canary"}}}`)
	if r.status != 403 || strings.Contains(string(r.body), "hunter2") {
		t.Fatalf("a job with credentials: %d %s", r.status, r.body)
	}
	rec := server.Record{Tier: "expr", Job: &airlock.Job{Kind: airlock.KindExpr, Code: "1", Grants: airlock.Grants{Secrets: map[string]string{"TOKEN": "[redacted]"}}}}
	if _, _, err := server.Replay(context.Background(), rec, nil); !errors.Is(err, server.ErrNotReplayable) {
		t.Errorf("replaying a job that held credentials: %v", err)
	}
	rec = server.Record{Tier: "process", Job: &airlock.Job{Kind: airlock.KindCommand, Argv: []string{"true"}}}
	if _, _, err := server.Replay(context.Background(), rec, nil); !errors.Is(err, server.ErrNotReplayable) {
		t.Errorf("replaying a command: %v", err)
	}
	if _, err := server.ParseRecord([]byte(`{"tenant":"a","bogus":1}`)); err == nil {
		t.Error("an unknown field in a record is accepted")
	}
}

// TestAuditReplaysEnv: a job's env is plain data: the audit trail keeps
// it, and the replay runs with it (the module prints its environment, so
// a replay without it would not match).
func TestAuditReplaysEnv(t *testing.T) {
	w2w, err := tools.Find("wat2wasm")
	if err != nil {
		testenv.Skipf(t, "the test's module needs wat2wasm (scripts/setup-wabt.sh): %v", err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "env.wat")
	if err := os.WriteFile(src, []byte(envWAT), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(w2w, src, "-o", filepath.Join(dir, "env.wasm")).CombinedOutput(); err != nil {
		t.Fatalf("wat2wasm: %v\n%s", err, out)
	}
	mod, err := os.ReadFile(filepath.Join(dir, "env.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t)
	job := `{"kind":"wasm","module":"` + base64.StdEncoding.EncodeToString(mod) + `","env":{"MODE":"plain-env-value"}}`
	r := f.do("POST", "/v1/run", keyA, job)
	if r.status != 200 || !strings.Contains(string(r.body), "MODE=plain-env-value") {
		t.Fatalf("run: %d %s", r.status, r.body)
	}
	lines := f.audit.Lines()
	if len(lines) != 1 || !strings.Contains(lines[0], `"env":{"MODE":"plain-env-value"}`) {
		t.Fatalf("audit trail: %q", lines)
	}
	rec, err := server.ParseRecord([]byte(lines[0]))
	if err != nil {
		t.Fatal(err)
	}
	tiers, err := tierset.Build(tierset.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tierset.Close(tiers)
	if res, match, err := server.Replay(context.Background(), rec, tiers); err != nil || !match {
		t.Fatalf("replay: match=%v err=%v result=%+v", match, err, res)
	}
	rec.Job.Env["MODE"] = "other"
	if _, match, _ := server.Replay(context.Background(), rec, tiers); match {
		t.Error("a replay with another env matches")
	}
}

// envWAT writes its environment (NUL-separated NAME=value strings) to
// stdout.
const envWAT = `(module
  (import "wasi_snapshot_preview1" "environ_sizes_get" (func $sizes (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "environ_get" (func $get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "_start")
    (drop (call $sizes (i32.const 0) (i32.const 4)))
    (drop (call $get (i32.const 64) (i32.const 1024)))
    (i32.store (i32.const 16) (i32.const 1024))
    (i32.store (i32.const 20) (i32.load (i32.const 4)))
    (drop (call $write (i32.const 1) (i32.const 16) (i32.const 1) (i32.const 24)))))`

// A tenant's input does not grow the audit trail past the job size the
// trail keeps: an error quoting a huge value of the job is cut (in the
// answer too), a job whose input, environment or grants are large is not
// kept, and grants past the server's bound are refused. Otherwise a few
// requests would rotate the trail's older records away.
func TestAuditRecordsStaySmall(t *testing.T) {
	f := newFixture(t)
	big := strings.Repeat("x", 2<<20)
	mid := big[:512<<10] // within the bound on grants
	rules := make([]map[string]any, 0, 6000)
	for i := range 6000 {
		rules = append(rules, map[string]any{"host": fmt.Sprintf("h%d.%s.example.com", i, strings.Repeat("a", 200))})
	}
	for _, c := range []struct {
		name   string
		job    map[string]any
		status int
	}{
		{"invalid env name", map[string]any{"kind": "wasm", "module": "AGFzbQEAAAA=", "env": map[string]string{"-" + big: "1"}}, 400},
		{"unknown kind", map[string]any{"kind": big}, 400},
		{"invalid host", map[string]any{"kind": "expr", "code": "1", "grants": map[string]any{"net": []map[string]any{{"host": "-" + mid}}}}, 400},
		{"large input", map[string]any{"kind": "expr", "code": "1", "input": map[string]any{"a": big}}, 200},
		{"runtime error", map[string]any{"kind": "starlark", "code": "fail('y' * 2000000)"}, 200},
		{"large grants", map[string]any{"kind": "expr", "code": "1", "grants": map[string]any{"net": rules}}, 400},
	} {
		before := len(nonEmpty(f.audit.Lines()))
		r := f.do("POST", "/v1/run", keyA, c.job)
		if r.status != c.status {
			t.Errorf("%s: status %d, want %d: %.300s", c.name, r.status, c.status, r.body)
		}
		if r.status != 200 && len(r.body) > 16<<10 {
			t.Errorf("%s: a %d-byte refusal: %.300s", c.name, len(r.body), r.body)
		}
		lines := nonEmpty(f.audit.Lines())
		if len(lines) != before+1 {
			t.Fatalf("%s: %d audit lines, want one more than %d", c.name, len(lines), before)
		}
		if n := len(lines[before]); n > 96<<10 {
			t.Errorf("%s: a %d-byte audit record: %.300s", c.name, n, lines[before])
		}
	}
}

func nonEmpty(lines []string) []string {
	var out []string
	for _, l := range lines {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}
