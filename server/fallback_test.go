package server_test

import (
	"context"
	"io"
	"net/http/httptest"
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
