package server_test

import (
	"context"
	"io"
	"net/http/httptest"
	"testing"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/tierset"
	"github.com/airlock-sandbox/airlock/server"
)

// acctTier stands in for the account tier (level 5, sessions kept by one
// account's executor): its runs answer the account they ran under.
type acctTier struct{}

func (acctTier) Name() string                { return "acct" }
func (acctTier) Level() airlock.Level        { return 5 }
func (acctTier) Admit(job airlock.Job) error { return nil }
func (acctTier) Accounts() []string          { return []string{"first", "second"} }
func (acctTier) Run(_ context.Context, job airlock.Job) (airlock.Result, error) {
	return airlock.Result{Tier: "acct", Value: job.Account}, nil
}
func (acctTier) OpenSession(_ context.Context, o airlock.SessionOptions) (airlock.Session, error) {
	return &acctSession{id: o.ID, account: o.Account}, nil
}

type acctSession struct{ id, account string }

func (s *acctSession) ID() string   { return s.id }
func (s *acctSession) Close() error { return nil }
func (s *acctSession) Run(_ context.Context, job airlock.Job) (airlock.Result, error) {
	return airlock.Result{Tier: "acct", Value: s.account + "/" + job.Account}, nil
}

// TestSessionApprovalBindsItsAccount: a session kept by an account other
// than the tenant's first runs its jobs under that account; a job asked
// for approval in it is bound to that account too, so its token holds
// there (it was bound to the tenant's first account, and was stale).
func TestSessionApprovalBindsItsAccount(t *testing.T) {
	cfg := testConfig()
	cfg.Tenants[0].Accounts = []string{"first", "second"}
	cfg.Tenants[0].Tiers = nil
	tiers, err := tierset.Build(tierset.Options{Limits: cfg.TierLimits()})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(cfg, append(tiers, acctTier{}), server.Options{Audit: io.Discard})
	if err != nil {
		_ = tierset.Close(tiers)
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	defer func() { hs.Close(); _ = srv.Close() }()
	f := &fixture{t: t, srv: srv, http: hs}
	var open struct{ ID string }
	r := f.do("POST", "/v1/sessions", keyA, `{"job":{"kind":"starlark","code":"1","tier":"acct","account":"second"}}`)
	if r.status != 201 {
		t.Fatalf("open: %d %s", r.status, r.body)
	}
	r.decode(t, &open)
	job := `{"kind":"starlark","situation":"internal","code":"result = 1","session":"` + open.ID + `"}`
	var req, tok approvalReply
	if r := f.do("POST", "/v1/approvals", keyA, job); r.status != 200 {
		t.Fatalf("approval request: %d %s", r.status, r.body)
	} else {
		r.decode(t, &req)
	}
	f.do("POST", "/v1/approvals/"+req.Digest+"/approve", keyApprover, nil).decode(t, &tok)
	r = f.do("POST", "/v1/sessions/"+open.ID+"/run", keyA, job, server.ApprovalHeader, tok.Token)
	if res := r.result(t); r.status != 200 || res.Value != "second/second" {
		t.Errorf("approved run in the session kept by account second: %d %s", r.status, r.body)
	}
}
