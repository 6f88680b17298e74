package server_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testing/tiertest"
	"github.com/airlock-sandbox/airlock/internal/value"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/interp/starlark"
	"github.com/airlock-sandbox/airlock/server"
)

func TestRunExpressionAndStarlark(t *testing.T) {
	f := newFixture(t)
	r := f.do("POST", "/v1/run", keyA, `{"kind":"expr","code":"1 + x","input":{"x":41}}`)
	if r.status != 200 {
		t.Fatalf("expr: status %d: %s", r.status, r.body)
	}
	res := r.result(t)
	if res.Tier != "expr" || fmt.Sprint(res.Value) != "42" || len(res.Decision) == 0 {
		t.Fatalf("expr result: %+v", res)
	}
	r = f.do("POST", "/v1/run", keyA, `{"kind":"starlark","code":"result = [i * i for i in range(4)]"}`)
	res = r.result(t)
	if r.status != 200 || res.Tier != "starlark" || fmt.Sprint(res.Value) != "[0 1 4 9]" {
		t.Fatalf("starlark: status %d: %s", r.status, r.body)
	}
	// A code error is the code's, not the request's: 200 with the error.
	r = f.do("POST", "/v1/run", keyA, `{"kind":"starlark","code":"fail('boom')"}`)
	res = r.result(t)
	if r.status != 200 || res.Error == nil || res.Error.Kind != airlock.ErrRuntime {
		t.Fatalf("runtime error: status %d: %s", r.status, r.body)
	}
	// A stop is reported in the result.
	r = f.do("POST", "/v1/run", keyA, `{"kind":"starlark","code":"x = 0\nfor i in range(1 << 40):\n    x += 1","limits":{"steps":1000}}`)
	res = r.result(t)
	if r.status != 200 || res.Stopped == nil || res.Stopped.Reason != airlock.StopSteps {
		t.Fatalf("steps: status %d: %s", r.status, r.body)
	}
}

func TestBadInputNamesTheField(t *testing.T) {
	f := newFixture(t)
	cases := []struct {
		name, path, body string
		status           int
		want             string
	}{
		{"malformed JSON", "/v1/run", `{"kind":"expr",`, 400, "truncated"},
		{"unknown field", "/v1/run", `{"kind":"expr","code":"1","colour":"red"}`, 400, "colour"},
		{"tenant in the job", "/v1/run", `{"kind":"expr","code":"1","tenant":"b"}`, 400, "tenant: unknown field"},
		{"wrong type", "/v1/run", `{"kind":"expr","code":1}`, 400, "code"},
		{"unknown kind", "/v1/run", `{"kind":"shell","code":"1"}`, 400, "kind"},
		{"limit above tenant max", "/v1/run", `{"kind":"expr","code":"1","limits":{"wall_ms":6000}}`, 400, "limits.wall_ms"},
		{"negative limit", "/v1/run", `{"kind":"expr","code":"1","limits":{"steps":-1}}`, 400, "limits.steps"},
		{"session on /v1/run", "/v1/run", `{"kind":"starlark","code":"1","session":"x","lifecycle":"session"}`, 400, "session"},
		{"oversize body", "/v1/run", `{"kind":"expr","code":"` + strings.Repeat("1", value.MaxJobBytes+10) + `"}`, 400, "larger"},
		{"empty body", "/v1/run", ``, 400, "empty"},
		{"unknown session", "/v1/sessions/s-nope/run", `{"kind":"starlark","code":"1"}`, 404, "unknown session"},
		{"unknown tier", "/v1/run", `{"kind":"expr","code":"1","tier":"nope"}`, 400, "tier"},
		{"unknown endpoint", "/v2/run", `{}`, 404, "no such endpoint"},
		{"session request unknown field", "/v1/sessions", `{"tier":"starlark","colour":1}`, 400, "colour"},
	}
	for _, c := range cases {
		r := f.do("POST", c.path, keyA, c.body)
		if r.status != c.status || !strings.Contains(string(r.body), c.want) {
			t.Errorf("%s: status %d body %.200s; want %d mentioning %q", c.name, r.status, r.body, c.status, c.want)
		}
	}
	if r := f.do("GET", "/v1/run", keyA, nil); r.status != http.StatusMethodNotAllowed || !strings.Contains(string(r.body), "GET /v1/run") {
		t.Errorf("GET /v1/run: status %d", r.status)
	}
}

func TestAuthentication(t *testing.T) {
	f := newFixture(t)
	for _, key := range []string{"", "wrong-key", keyApprover} {
		r := f.do("POST", "/v1/run", key, `{"kind":"expr","code":"1"}`)
		if r.status != 401 || r.header.Get("WWW-Authenticate") == "" {
			t.Errorf("key %q: status %d: %s", key, r.status, r.body)
		}
	}
	if r := f.do("GET", "/healthz", "", nil); r.status != 200 {
		t.Errorf("healthz: %d", r.status)
	}
}

func TestTenantRules(t *testing.T) {
	f := newFixture(t)
	// b may not use the credentials situation, nor a tier outside its list.
	r := f.do("POST", "/v1/run", keyB, `{"kind":"expr","code":"1","situation":"multi-tenant"}`)
	if r.status != 403 || !strings.Contains(string(r.body), "situation multi-tenant") {
		t.Errorf("situation: %d %s", r.status, r.body)
	}
	r = f.do("POST", "/v1/run", keyB, `{"kind":"expr","code":"1","tier":"wasm"}`)
	if r.status != 403 || !strings.Contains(string(r.body), "may not use tier wasm") {
		t.Errorf("tier: %d %s", r.status, r.body)
	}
	// A tier name no tier has is a typo (400, invalid), also for a
	// tenant with a tier list; explain names it so as its tenant refusal.
	r = f.do("POST", "/v1/run", keyB, `{"kind":"expr","code":"1","tier":"starlrak"}`)
	if r.status != 400 || !strings.Contains(string(r.body), `unknown tier \"starlrak\"`) || !strings.Contains(string(r.body), `"invalid"`) {
		t.Errorf("unknown tier: %d %s", r.status, r.body)
	}
	r = f.do("POST", "/v1/explain", keyB, `{"kind":"expr","code":"1","tier":"starlrak"}`)
	if !strings.Contains(string(r.body), `"tenant_refusal":"invalid job: tier: unknown tier \"starlrak\"`) {
		t.Errorf("explain, unknown tier: %d %s", r.status, r.body)
	}
	// a's maximum is b's default policy's maximum: b may ask for more.
	r = f.do("POST", "/v1/run", keyB, `{"kind":"expr","code":"1","limits":{"wall_ms":6000}}`)
	if r.status != 200 {
		t.Errorf("b's own maximum: %d %s", r.status, r.body)
	}
	var tiers []map[string]any
	f.do("GET", "/v1/tiers", keyB, nil).decode(t, &tiers)
	for _, ti := range tiers {
		if allowed := ti["allowed"].(bool); allowed != (ti["name"] == "expr" || ti["name"] == "starlark") {
			t.Errorf("tier list for b: %v", ti)
		}
	}
}

func TestTenantsDoNotSeeEachOther(t *testing.T) {
	f := newFixture(t)
	var open struct{ ID, Tier string }
	r := f.do("POST", "/v1/sessions", keyA, `{"tier":"starlark"}`)
	r.decode(t, &open)
	if r.status != 201 || open.ID == "" {
		t.Fatalf("open: %d %s", r.status, r.body)
	}
	f.do("POST", "/v1/sessions/"+open.ID+"/run", keyA, `{"kind":"starlark","code":"secret = 'a-only'"}`)
	// b gets exactly what an unknown session gets.
	rb := f.do("POST", "/v1/sessions/"+open.ID+"/run", keyB, `{"kind":"starlark","code":"result = secret"}`)
	rn := f.do("POST", "/v1/sessions/s-00000000000000000000000000000000/run", keyB, `{"kind":"starlark","code":"result = secret"}`)
	if rb.status != 404 || strings.Contains(string(rb.body), "a-only") || rn.status != rb.status {
		t.Errorf("b ran in a's session: %d %s", rb.status, rb.body)
	}
	if r := f.do("DELETE", "/v1/sessions/"+open.ID, keyB, nil); r.status != 404 {
		t.Errorf("b closed a's session: %d", r.status)
	}
	f.do("POST", "/v1/run", keyB, `{"kind":"expr","code":"'b-run'"}`)
	var recs []server.Record
	f.do("GET", "/v1/audit", keyB, nil).decode(t, &recs)
	if len(recs) != 1 || recs[0].Tenant != "b" {
		t.Errorf("b's audit: %+v", recs)
	}
	f.do("GET", "/v1/audit", keyA, nil).decode(t, &recs)
	for _, rec := range recs {
		if rec.Tenant != "a" {
			t.Errorf("a sees a record of %s", rec.Tenant)
		}
	}
	// a's pending approval is invisible to b.
	var ap struct{ Digest string }
	f.do("POST", "/v1/approvals", keyA, `{"kind":"starlark","code":"result = 1","situation":"internal"}`).decode(t, &ap)
	if r := f.do("GET", "/v1/approvals/"+ap.Digest, keyB, nil); r.status != 404 {
		t.Errorf("b sees a's approval: %d %s", r.status, r.body)
	}
}

func TestSessions(t *testing.T) {
	f := newFixture(t)
	var open struct {
		ID, Tier string
		Decision []string
	}
	r := f.do("POST", "/v1/sessions", keyA, `{"job":{"kind":"starlark","code":"x = 1"}}`)
	r.decode(t, &open)
	if r.status != 201 || open.Tier != "starlark" || len(open.Decision) == 0 {
		t.Fatalf("open by the router: %d %s", r.status, r.body)
	}
	path := "/v1/sessions/" + open.ID + "/run"
	f.do("POST", path, keyA, `{"kind":"starlark","code":"count = 1"}`)
	res := f.do("POST", path, keyA, `{"kind":"starlark","code":"count += 1\nresult = count"}`).result(t)
	if fmt.Sprint(res.Value) != "2" {
		t.Fatalf("state did not survive: %+v", res)
	}
	if r := f.do("POST", path, keyA, `{"kind":"expr","code":"1"}`); r.status != 403 {
		t.Errorf("an expr job in a starlark session: %d %s", r.status, r.body)
	}
	if r := f.do("POST", "/v1/sessions", keyA, `{"tier":"expr"}`); r.status != 403 || !strings.Contains(string(r.body), "keeps no sessions") {
		t.Errorf("a session on expr: %d %s", r.status, r.body)
	}
	if r := f.do("POST", "/v1/sessions", keyA, `{"tier":"starlark","ttl":"2h"}`); r.status != 400 || !strings.Contains(string(r.body), "ttl") {
		t.Errorf("a TTL above the maximum: %d %s", r.status, r.body)
	}
	if r := f.do("DELETE", "/v1/sessions/"+open.ID, keyA, nil); r.status != 204 {
		t.Fatalf("close: %d %s", r.status, r.body)
	}
	if r := f.do("POST", path, keyA, `{"kind":"starlark","code":"result = count"}`); r.status != 404 {
		t.Errorf("run after close: %d %s", r.status, r.body)
	}
	// Idle sessions are closed by the TTL.
	r = f.do("POST", "/v1/sessions", keyA, `{"tier":"starlark","ttl":"1ms"}`)
	r.decode(t, &open)
	time.Sleep(5 * time.Millisecond)
	if r := f.do("POST", "/v1/sessions/"+open.ID+"/run", keyA, `{"kind":"starlark","code":"result = 1"}`); r.status == 200 {
		t.Errorf("an expired session still runs: %s", r.body)
	}
}

// TestSessionTTLBounds: a session's ttl is at most the server's; a
// negative one is refused naming the field, not read as the maximum.
func TestSessionTTLBounds(t *testing.T) {
	f := newFixture(t)
	for body, want := range map[string]int{
		`{"tier":"starlark","ttl":"-5s"}`:  400,
		`{"tier":"starlark","ttl":"100h"}`: 400,
		`{"tier":"starlark","ttl":"1m"}`:   201,
		`{"tier":"starlark"}`:              201,
	} {
		r := f.do("POST", "/v1/sessions", keyA, body)
		if r.status != want || (want == 400 && !strings.Contains(string(r.body), "ttl")) {
			t.Errorf("%s: %d %s, want %d", body, r.status, r.body, want)
		}
	}
}

func TestSessionQuota(t *testing.T) {
	f := newFixture(t, func(c *server.Config) { c.MaxSessions = 2 })
	for i := range 3 {
		r := f.do("POST", "/v1/sessions", keyA, `{"tier":"starlark"}`)
		if want := map[bool]int{true: 201, false: 429}[i < 2]; r.status != want {
			t.Errorf("session %d: status %d, want %d: %s", i, r.status, want, r.body)
		}
	}
}

// Opening a session starts a sandbox as a run does, and spends the
// tenant's runs per minute: opening and closing sessions in a loop, each
// well within max_sessions, is held to the rate.
func TestSessionsSpendTheRate(t *testing.T) {
	f := newFixture(t, func(c *server.Config) { c.Tenants[1].RunsPerMinute = 10 })
	statuses := map[int]int{}
	for range 10 {
		r := f.do("POST", "/v1/sessions", keyB, `{"tier":"starlark"}`)
		statuses[r.status]++
		if r.status == 201 {
			var open struct{ ID string }
			r.decode(t, &open)
			if d := f.do("DELETE", "/v1/sessions/"+open.ID, keyB, nil); d.status != 204 {
				t.Fatalf("close: %d %s", d.status, d.body)
			}
		} else if r.header.Get("Retry-After") == "" {
			t.Errorf("%d without Retry-After: %s", r.status, r.body)
		}
	}
	if statuses[http.StatusCreated] > 2 || statuses[http.StatusTooManyRequests] == 0 {
		t.Errorf("10 sessions opened and closed at 10 runs per minute (burst 1): %v", statuses)
	}
}

// A session is idle when nothing runs in it: a run longer than the
// session's TTL does not get its session closed under it by the janitor,
// and the next run finds it.
func TestSessionNotIdleWhileRunning(t *testing.T) {
	f := newFixture(t, func(c *server.Config) {
		c.SessionTTL = server.Duration(4 * time.Second) // the janitor looks every second
		c.Tenants[0].Limits.Max.Steps = 1 << 40
	})
	var open struct{ ID string }
	if r := f.do("POST", "/v1/sessions", keyA, `{"tier":"starlark","ttl":"1s"}`); r.status != 201 {
		t.Fatalf("open: %d %s", r.status, r.body)
	} else {
		r.decode(t, &open)
	}
	path := "/v1/sessions/" + open.ID + "/run"
	long := `{"kind":"starlark","code":"x = 0\nfor i in range(1 << 40):\n    x += 1","limits":{"wall_ms":3000,"steps":10000000000}}`
	r := f.do("POST", path, keyA, long)
	if res := r.result(t); r.status != 200 || res.Stopped == nil {
		t.Fatalf("long run: %d %s", r.status, r.body)
	}
	if r := f.do("POST", path, keyA, `{"kind":"starlark","code":"result = 1"}`); r.status != 200 {
		t.Errorf("the run after a run longer than the TTL: %d %s", r.status, r.body)
	}
}

// Asking for an approval keeps a pending job and wakes every approver's
// console: it spends the tenant's runs per minute as a run does.
func TestApprovalRequestsSpendTheRate(t *testing.T) {
	f := newFixture(t, func(c *server.Config) { c.Tenants[1].RunsPerMinute = 10 })
	statuses := map[int]int{}
	for i := range 10 {
		r := f.do("POST", "/v1/approvals", keyB, fmt.Sprintf(`{"kind":"starlark","situation":"internal","code":"result = %d"}`, i))
		statuses[r.status]++
		if r.status != 200 && r.header.Get("Retry-After") == "" {
			t.Errorf("%d without Retry-After: %s", r.status, r.body)
		}
	}
	if statuses[http.StatusOK] > 2 || statuses[http.StatusTooManyRequests] == 0 {
		t.Errorf("10 approval requests at 10 runs per minute (burst 1): %v", statuses)
	}
	// A job that needs no approval keeps nothing and spends nothing.
	if r := f.do("POST", "/v1/approvals", keyB, `{"kind":"expr","code":"1"}`); r.status != 200 {
		t.Errorf("a job needing no approval, with the rate spent: %d %s", r.status, r.body)
	}
}

func TestOverload(t *testing.T) {
	f := newFixture(t, func(c *server.Config) {
		c.Tenants[1].MaxConcurrent = 1
		c.QueueWait = server.Duration(10 * time.Millisecond)
	})
	const n = 12
	statuses := make(chan reply, n)
	for range n {
		go func() {
			statuses <- f.do("POST", "/v1/run", keyB, `{"kind":"starlark","code":"x = 0\nfor i in range(1 << 40):\n    x += 1","limits":{"wall_ms":300}}`)
		}()
	}
	var ok, busy int
	for range n {
		r := <-statuses
		switch r.status {
		case 200:
			ok++
		case 429:
			busy++
			if r.header.Get("Retry-After") == "" {
				t.Error("429 without Retry-After")
			}
		default:
			t.Errorf("status %d: %s", r.status, r.body)
		}
	}
	if ok == 0 || busy == 0 {
		t.Errorf("%d ran, %d refused: want both (one slot, a short queue)", ok, busy)
	}
	if !strings.Contains(string(f.do("GET", "/metrics", "", nil).body), `airlock_refused_total{reason="429"}`) {
		t.Error("429s are not counted")
	}
}

func TestRateLimit(t *testing.T) {
	f := newFixture(t, func(c *server.Config) { c.Tenants[1].RunsPerMinute = 10 })
	var limited bool
	for range 5 {
		r := f.do("POST", "/v1/run", keyB, `{"kind":"expr","code":"1"}`)
		if r.status == 429 {
			limited = r.header.Get("Retry-After") == "6"
			break
		}
	}
	if !limited {
		t.Error("10 runs per minute (burst 1) let 5 runs through, or no Retry-After: 6")
	}
	if r := f.do("POST", "/v1/run", keyA, `{"kind":"expr","code":"1"}`); r.status != 200 {
		t.Errorf("tenant a is limited by b's quota: %d", r.status)
	}
}

// Refused runs spend the tenant's runs per minute as runs do: each is an
// audit record, so a tenant cannot write records faster than its quota by
// sending jobs its rules refuse.
func TestRefusedRunsSpendTheRate(t *testing.T) {
	f := newFixture(t, func(c *server.Config) { c.Tenants[1].RunsPerMinute = 10 })
	statuses := map[int]int{}
	for range 20 {
		// The starlark tier runs no expressions: each is refused.
		r := f.do("POST", "/v1/run", keyB, `{"kind":"expr","code":"1","tier":"starlark"}`)
		statuses[r.status]++
	}
	if statuses[http.StatusTooManyRequests] == 0 {
		t.Errorf("20 refused runs at 10 runs per minute (burst 1) were never limited: %v", statuses)
	}
	if n := len(f.auditRecords()); n > 2 {
		t.Errorf("%d audit records from 20 refused runs at 10 runs per minute (burst 1)", n)
	}
}

func TestMetrics(t *testing.T) {
	f := newFixture(t)
	f.do("POST", "/v1/run", keyA, `{"kind":"expr","code":"1"}`)
	f.do("POST", "/v1/run", keyA, `{"kind":"starlark","code":"fail('x')"}`)
	f.do("POST", "/v1/run", keyA, `{"kind":"expr","code":"1","limits":{"wall_ms":-1}}`)
	r := f.do("POST", "/v1/run", keyA, `{"kind":"starlark","code":"load('/etc/passwd', 'x')"}`)
	if res := r.result(t); res.Stopped == nil || res.Stopped.Reason != airlock.StopDenied {
		t.Fatalf("load of a host file: %s", r.body)
	}
	body := string(f.do("GET", "/metrics", "", nil).body)
	if f.srv.Router().Unavailable("gvisor") == nil {
		for _, want := range []string{`airlock_pool_size{tier="gvisor"} `, `airlock_pool_capacity{tier="gvisor"} `, `airlock_pool_claims_total{tier="gvisor",result="miss"} `} {
			if !strings.Contains(body, want) {
				t.Errorf("metrics lack the gVisor pool's %q", want)
			}
		}
	}
	if f.srv.Router().Unavailable("process") == nil {
		// Every pooled tier (airlock.Pooler) is exported, not only gVisor.
		for _, want := range []string{`airlock_pool_capacity{tier="process"} `, `airlock_pool_claims_total{tier="guarded-expr",result="hit"} `} {
			if !strings.Contains(body, want) {
				t.Errorf("metrics lack %q", want)
			}
		}
	}
	for _, want := range []string{
		`airlock_runs_total{tier="expr",outcome="ok"} 1`,
		`airlock_runs_total{tier="starlark",outcome="error_runtime"} 1`,
		`airlock_run_duration_seconds_bucket{tier="expr",le="+Inf"} 1`,
		`airlock_run_duration_seconds_count{tier="starlark"} 2`,
		`airlock_refused_total{reason="400"} 1`,
		`airlock_runs_total{tier="starlark",outcome="stopped_denied"} 1`,
		`airlock_denials_total{capability="fs"} 1`,
		"# TYPE airlock_run_duration_seconds histogram",
		"airlock_sessions_open 0",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q:\n%s", want, body)
		}
	}
}

func TestExplainAndTiers(t *testing.T) {
	f := newFixture(t)
	var x struct {
		Explanation struct{ Chosen string }
		Approval    string `json:"approval_required"`
	}
	f.do("POST", "/v1/explain", keyA, `{"kind":"starlark","code":"1","situation":"internal"}`).decode(t, &x)
	if x.Explanation.Chosen == "" && x.Approval != "" {
		t.Errorf("explain: %+v", x)
	}
	f.do("POST", "/v1/explain", keyA, `{"kind":"expr","code":"1"}`).decode(t, &x)
	if x.Explanation.Chosen != "expr" {
		t.Errorf("explain expr: %+v", x)
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, fmt.Errorf("disk full") }

func TestHealthReportsAuditFailure(t *testing.T) {
	srv, err := newServer(testConfig(), server.Options{Audit: failingWriter{}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	f := &fixture{t: t, srv: srv, http: hs}
	if r := f.do("GET", "/healthz", "", nil); r.status != 200 {
		t.Fatalf("healthz before a failure: %d", r.status)
	}
	f.do("POST", "/v1/run", keyA, `{"kind":"expr","code":"1"}`)
	// Unauthenticated: it says that the trail is failing, not why.
	if r := f.do("GET", "/healthz", "", nil); r.status != 503 || !strings.Contains(string(r.body), `"audit":"failing`) || strings.Contains(string(r.body), "disk full") {
		t.Errorf("healthz after an audit write failed: %d %s", r.status, r.body)
	}
}

// With approvals.key_file, a token outlives the server that issued it.
func TestApprovalKeyFileSurvivesRestart(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "approval.key")
	if err := os.WriteFile(keyFile, []byte(strings.Repeat("k", 32)), 0o600); err != nil {
		t.Fatal(err)
	}
	withKey := func(c *server.Config) { c.Approvals.KeyFile = keyFile }
	first := newFixture(t, withKey)
	tok := first.approve(t, keyA, approvedJob)
	second := newFixture(t, withKey)
	if r := second.do("POST", "/v1/run", keyA, approvedJob, server.ApprovalHeader, tok.Token); r.status != 200 {
		t.Errorf("a token from the same key file is refused after a restart: %d %s", r.status, r.body)
	}
	third := newFixture(t) // a random key: the token is not its own
	expectStale(t, third.do("POST", "/v1/run", keyA, approvedJob, server.ApprovalHeader, tok.Token), "not signed")
	os.WriteFile(keyFile, []byte("short"), 0o600)
	cfg := testConfig()
	withKey(&cfg)
	if _, err := newServer(cfg, server.Options{}); err == nil || !strings.Contains(err.Error(), "at least 32") {
		t.Errorf("a short key file: %v", err)
	}
}

// Sessions on an OS tier keep their scratch between runs, and a job in the
// session is still routed: the policy decides whether gVisor is enough.
func TestGVisorSession(t *testing.T) {
	f := newFixture(t)
	if err := f.srv.Router().Unavailable("gvisor"); err != nil {
		tiertest.Unavailable(t, "gvisor", err)
	}
	var open struct{ ID, Tier string }
	r := f.do("POST", "/v1/sessions", keyA, `{"job":{"kind":"command","argv":["true"]}}`)
	r.decode(t, &open)
	if r.status != 201 || open.Tier != "gvisor" {
		t.Fatalf("open: %d %s", r.status, r.body)
	}
	defer f.do("DELETE", "/v1/sessions/"+open.ID, keyA, nil)
	path := "/v1/sessions/" + open.ID + "/run"
	if r := f.do("POST", path, keyA, `{"kind":"command","argv":["sh","-c","echo kept > note"]}`); r.status != 200 {
		t.Fatalf("first run: %d %s", r.status, r.body)
	}
	r = f.do("POST", path, keyA, `{"kind":"command","argv":["cat","note"]}`)
	if res := r.result(t); r.status != 200 || res.Stdout != "kept\n" || res.Tier != "gvisor" {
		t.Errorf("second run: %d %s", r.status, r.body)
	}
	// Credentials need production isolation (level 5): not in this session.
	r = f.do("POST", path, keyA, `{"kind":"command","argv":["true"],"situation":"credentials"}`)
	if r.status != 403 {
		t.Errorf("a credentials job in a gVisor session: %d %s", r.status, r.body)
	}
}

// ownStarlark is the real Starlark tier, built by the test, counting the
// server's Close calls.
type ownStarlark struct {
	*starlark.Tier
	closes int
}

func (o *ownStarlark) Close() error { o.closes++; return nil }

// A server runs jobs on the tiers its caller built, and only on those,
// and closes them when it closes.
func TestServesTheCallersTiers(t *testing.T) {
	tier, err := starlark.New(starlark.NewConfig())
	if err != nil {
		t.Fatal(err)
	}
	own := &ownStarlark{Tier: tier}
	cfg := server.Config{Tenants: []server.Tenant{{Name: "a", KeySHA256: server.HashKey(keyA)}}}
	srv, err := server.New(cfg, []airlock.Tier{own}, server.Options{Audit: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, srv: srv, http: httptest.NewServer(srv.Handler())}
	defer f.http.Close()
	if got := srv.Router().Tiers(); len(got) != 1 || got[0] != airlock.Tier(own) {
		t.Fatalf("the router has %v, want the caller's tier alone", got)
	}
	r := f.do("POST", "/v1/run", keyA, `{"kind":"starlark","code":"result = 6 * 7"}`)
	if res := r.result(t); r.status != 200 || res.Tier != "starlark" || fmt.Sprint(res.Value) != "42" {
		t.Fatalf("starlark: status %d: %s", r.status, r.body)
	}
	// No expr tier was given: nothing runs an expression.
	r = f.do("POST", "/v1/run", keyA, `{"kind":"expr","code":"1 + 1"}`)
	if res := r.result(t); res.Error == nil || res.Error.Kind != airlock.ErrNotAdmitted {
		t.Fatalf("expr without an expr tier: status %d: %s", r.status, r.body)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if own.closes != 1 {
		t.Errorf("the caller's tier was closed %d times, want 1", own.closes)
	}
}

// TestTenantTierTypo: a tenant's tier list naming a tier the server does
// not have is a configuration error at start, naming the tenant and the
// tiers there are, not a tier the tenant silently never gets.
func TestTenantTierTypo(t *testing.T) {
	cfg := testConfig()
	cfg.Tenants[1].Tiers = []string{"exr", "starlark"}
	srv, err := newServer(cfg, server.Options{Audit: io.Discard})
	if err == nil {
		srv.Close()
		t.Fatal("a tenant's unknown tier was accepted")
	}
	if !strings.Contains(err.Error(), `tenants[1].tiers: unknown tier "exr" (want one of expr, starlark`) {
		t.Errorf("error: %v", err)
	}
}
