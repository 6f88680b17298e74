package server_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/approve"
	"github.com/airlock-sandbox/airlock/server"
)

// refusingTier admits every job but refuses it in its own Run, as a
// self-admitting tier (AdmitsInRun) whose Run finds what Admit did not.
type refusingTier struct{}

func (refusingTier) Name() string            { return "refuser" }
func (refusingTier) Level() airlock.Level    { return airlock.LevelVirtualisation }
func (refusingTier) Cost() time.Duration     { return time.Millisecond }
func (refusingTier) AdmitsInRun()            {}
func (refusingTier) Admit(airlock.Job) error { return nil }
func (refusingTier) Run(context.Context, airlock.Job) (airlock.Result, error) {
	err := &airlock.NotAdmitted{Tier: "refuser", Reason: "refused in Run"}
	res := airlock.Result{Tier: "refuser", Level: airlock.LevelVirtualisation}
	res.SetError(err)
	return res, err
}

// flakyTier admits the first job it is asked about and refuses after:
// a tier that becomes unavailable between the tenant's checks and the run.
type flakyTier struct{ asked *atomic.Int32 }

func (flakyTier) Name() string         { return "flaky" }
func (flakyTier) Level() airlock.Level { return airlock.LevelVirtualisation }
func (flakyTier) Cost() time.Duration  { return time.Millisecond }
func (f flakyTier) Admit(airlock.Job) error {
	if f.asked.Add(1) > 1 {
		return &airlock.NotAdmitted{Tier: "flaky", Reason: "unavailable: gone"}
	}
	return nil
}
func (flakyTier) Run(context.Context, airlock.Job) (airlock.Result, error) {
	return airlock.Result{Tier: "flaky", Level: airlock.LevelVirtualisation, Value: "ran"}, nil
}

// countingTier runs every job and counts the runs.
type countingTier struct{ runs *atomic.Int32 }

func (countingTier) Name() string            { return "runner" }
func (countingTier) Level() airlock.Level    { return airlock.LevelVirtualisation }
func (countingTier) Cost() time.Duration     { return 2 * time.Millisecond }
func (countingTier) Admit(airlock.Job) error { return nil }
func (c countingTier) Run(context.Context, airlock.Job) (airlock.Result, error) {
	c.runs.Add(1)
	return airlock.Result{Tier: "runner", Level: airlock.LevelVirtualisation, Value: "ran"}, nil
}

// A job the routed tier refuses in its own Run, or that tier refuses once
// the tenant's rules were checked, is refused: it does not move on to a
// tier the tenant may not use, nor to one whose approval rule the routed
// tier did not meet.
func TestRunRefusedInRunDoesNotFallBack(t *testing.T) {
	for _, c := range []struct {
		name   string
		tenant server.Tenant
		rules  *[]approve.Rule
		first  func() airlock.Tier
	}{
		{"tenant-tiers", server.Tenant{Tiers: []string{"refuser"}}, nil, func() airlock.Tier { return refusingTier{} }},
		{"approval", server.Tenant{}, &[]approve.Rule{{Name: "runner-needs-approval", Tiers: []string{"runner"}}}, func() airlock.Tier { return refusingTier{} }},
		{"unavailable-after-admit", server.Tenant{Tiers: []string{"flaky"}}, nil, func() airlock.Tier { return flakyTier{new(atomic.Int32)} }},
		{"unavailable-after-admit-approval", server.Tenant{}, &[]approve.Rule{{Name: "runner-needs-approval", Tiers: []string{"runner"}}}, func() airlock.Tier { return flakyTier{new(atomic.Int32)} }},
	} {
		t.Run(c.name, func(t *testing.T) {
			var runs atomic.Int32
			ten := c.tenant
			ten.Name, ten.KeySHA256 = "a", server.HashKey(keyA)
			cfg := server.Config{Tenants: []server.Tenant{ten}}
			if c.rules != nil {
				cfg.Approvals = &server.Approvals{TTL: server.Duration(time.Minute), Rules: c.rules}
			}
			srv, err := server.New(cfg, []airlock.Tier{c.first(), countingTier{&runs}}, server.Options{Audit: io.Discard})
			if err != nil {
				t.Fatal(err)
			}
			f := &fixture{t: t, srv: srv, http: httptest.NewServer(srv.Handler())}
			defer func() {
				f.http.Close()
				_ = srv.Close()
			}()
			r := f.do("POST", "/v1/run", keyA, `{"kind":"starlark","code":"result = 1","situation":"public","grants":{"spawn":true}}`)
			res := r.result(t)
			if runs.Load() != 0 || res.Tier == "runner" {
				t.Fatalf("the job ran on runner (%d runs): status %d: %s", runs.Load(), r.status, r.body)
			}
			if res.Error == nil || res.Error.Kind != airlock.ErrNotAdmitted {
				t.Fatalf("want not admitted: status %d: %s", r.status, r.body)
			}
		})
	}
}

// Explanations, over HTTP and as the MCP explain tool, refuse what a run
// refuses for the tier the router chose: a tier the tenant may not use,
// and the account tier for a tenant with no account.
func TestExplainAppliesTheTenantsTierRules(t *testing.T) {
	var runs atomic.Int32
	cfg := server.Config{Tenants: []server.Tenant{
		{Name: "a", KeySHA256: server.HashKey(keyA), Tiers: []string{"acct"}},
		{Name: "b", KeySHA256: server.HashKey(keyB), Situation: airlock.SituationCredentials},
	}}
	srv, err := server.New(cfg, []airlock.Tier{countingTier{&runs}, acctTier{}}, server.Options{Audit: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, srv: srv, http: httptest.NewServer(srv.Handler())}
	defer func() { f.http.Close(); _ = srv.Close() }()
	for _, c := range []struct{ tenant, key, want string }{
		{"a", keyA, "may not use tier runner"},
		{"b", keyB, "may use no account"},
	} {
		job := `{"kind":"command","argv":["true"]}`
		r := f.do("POST", "/v1/run", c.key, job)
		if res := r.result(t); res.Error == nil || !strings.Contains(res.Error.Message, c.want) {
			t.Fatalf("tenant %s: run: status %d: %s", c.tenant, r.status, r.body)
		}
		var x struct {
			Tenant string `json:"tenant_refusal"`
		}
		f.do("POST", "/v1/explain", c.key, job).decode(t, &x)
		if !strings.Contains(x.Tenant, c.want) {
			t.Errorf("tenant %s: POST /v1/explain: tenant_refusal %q, want %q", c.tenant, x.Tenant, c.want)
		}
		cs := connectMemory(t, f, c.tenant)
		res, _ := call(t, cs, "explain", map[string]any{"kind": "command", "argv": []string{"true"}})
		if !res.IsError || !strings.Contains(text(res), c.want) {
			t.Errorf("tenant %s: MCP explain: %s", c.tenant, text(res))
		}
	}
	if runs.Load() != 0 {
		t.Errorf("%d runs on tier runner", runs.Load())
	}
}

// attachTier is a level-4 tier that would attach a wrapped MCP server;
// it counts the attempts and attaches nothing.
type attachTier struct {
	name     string
	cost     time.Duration
	attached *atomic.Int32
}

func (a attachTier) Name() string          { return a.name }
func (attachTier) Level() airlock.Level    { return airlock.LevelVirtualisation }
func (a attachTier) Cost() time.Duration   { return a.cost }
func (attachTier) Admit(airlock.Job) error { return nil }
func (a attachTier) Run(context.Context, airlock.Job) (airlock.Result, error) {
	return airlock.Result{Tier: a.name}, nil
}
func (a attachTier) Attach(context.Context, airlock.Job) (airlock.Attached, error) {
	a.attached.Add(1)
	return nil, &airlock.NotAdmitted{Tier: a.name, Reason: "attaches nothing in this test"}
}

// A wrapped MCP server runs on a tier its tenant may use: the router's
// cheapest choice is refused when it is not among the tenant's tiers.
func TestWrappedServerOnTheTenantsTiers(t *testing.T) {
	var cheap, other atomic.Int32
	cfg := server.Config{Tenants: []server.Tenant{{Name: "a", KeySHA256: server.HashKey(keyA), Tiers: []string{"other"},
		MCPWrapped: []server.WrappedServer{{Name: "w", Argv: []string{"server"}}}}}}
	srv, err := server.New(cfg, []airlock.Tier{attachTier{"cheap", time.Millisecond, &cheap}, attachTier{"other", 2 * time.Millisecond, &other}}, server.Options{Audit: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	defer func() { hs.Close(); _ = srv.Close() }()
	status, _, body := mcpPostTo(t, hs.URL+"/mcp/wrapped/w", keyA, "", mcpInit)
	t.Logf("%d %s", status, body)
	if cheap.Load() != 0 {
		t.Errorf("the wrapped server was attached on tier cheap, which the tenant may not use (status %d)", status)
	}
	if status != http.StatusForbidden {
		t.Errorf("status %d, want 403", status)
	}
}

// vmTier is a level-4 tier that keeps sessions (a stand-in for gVisor):
// its runs and its sessions' runs count.
type vmTier struct{ runs *atomic.Int32 }

func (vmTier) Name() string            { return "vm" }
func (vmTier) Level() airlock.Level    { return airlock.LevelVirtualisation }
func (vmTier) Admit(airlock.Job) error { return nil }
func (v vmTier) Run(context.Context, airlock.Job) (airlock.Result, error) {
	v.runs.Add(1)
	return airlock.Result{Tier: "vm", Value: "ran"}, nil
}
func (v vmTier) OpenSession(_ context.Context, o airlock.SessionOptions) (airlock.Session, error) {
	return vmSession{id: o.ID, runs: v.runs}, nil
}

type vmSession struct {
	id   string
	runs *atomic.Int32
}

func (s vmSession) ID() string   { return s.id }
func (s vmSession) Close() error { return nil }
func (s vmSession) Run(context.Context, airlock.Job) (airlock.Result, error) {
	s.runs.Add(1)
	return airlock.Result{Tier: "vm", Value: "ran in the session"}, nil
}

// A rule that allows only ephemeral jobs (multi-tenant, by default) holds
// for sessions: its jobs neither open one nor run in one, whichever way
// the session was opened.
func TestSessionsKeepTheRulesLifecycles(t *testing.T) {
	var runs atomic.Int32
	cfg := server.Config{Tenants: []server.Tenant{{Name: "a", KeySHA256: server.HashKey(keyA),
		Situation: airlock.SituationMultiTenant, Situations: []airlock.Situation{airlock.SituationMultiTenant, airlock.SituationPublic}}}}
	srv, err := server.New(cfg, []airlock.Tier{vmTier{&runs}}, server.Options{Audit: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, srv: srv, http: httptest.NewServer(srv.Handler())}
	defer func() { f.http.Close(); _ = srv.Close() }()
	if r := f.do("POST", "/v1/sessions", keyA, `{"job":{"kind":"command","argv":["true"]}}`); r.status != 403 || !strings.Contains(string(r.body), "not session") {
		t.Errorf("a session for a multi-tenant job: %d %s", r.status, r.body)
	}
	// Opened by tier name for public jobs, which may keep state.
	r := f.do("POST", "/v1/sessions", keyA, `{"tier":"vm"}`)
	if r.status != 201 {
		t.Fatalf("open by tier name: %d %s", r.status, r.body)
	}
	var open struct{ ID string }
	r.decode(t, &open)
	r = f.do("POST", "/v1/sessions/"+open.ID+"/run", keyA, `{"kind":"command","argv":["true"]}`)
	if res := r.result(t); res.Error == nil || res.Error.Kind != airlock.ErrNotAdmitted {
		t.Errorf("a multi-tenant job in a session: %d %s", r.status, r.body)
	}
	r = f.do("POST", "/v1/sessions/"+open.ID+"/run", keyA, `{"kind":"command","argv":["true"],"situation":"public"}`)
	if res := r.result(t); r.status != 200 || res.Value != "ran in the session" {
		t.Errorf("a public job in the session: %d %s", r.status, r.body)
	}
	if runs.Load() != 1 {
		t.Errorf("%d runs, want the public job's alone", runs.Load())
	}
}
