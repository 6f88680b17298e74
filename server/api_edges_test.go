package server_test

import (
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testing/tiertest"
)

// Lists answer [] when empty, never null.
func TestEmptyListsAreArrays(t *testing.T) {
	f := newFixture(t)
	for _, path := range []string{"/v1/sessions", "/v1/approvals", "/v1/audit"} {
		r := f.do("GET", path, keyB, nil)
		if r.status != 200 || strings.TrimSpace(string(r.body)) != "[]" {
			t.Errorf("GET %s with nothing to list: %d %s", path, r.status, r.body)
		}
	}
}

// A known path with another method is 405 with Allow, in the API's error
// shape; an unknown path stays 404.
func TestWrongMethod(t *testing.T) {
	f := newFixture(t)
	for _, c := range []struct{ method, path, allow string }{
		{"GET", "/v1/run", "POST"},
		{"DELETE", "/v1/tiers", "GET"},
		{"PUT", "/v1/sessions", "GET, POST"},
		{"GET", "/v1/sessions/s-1/run", "POST"},
		{"POST", "/v1/sessions/s-1", "DELETE"},
	} {
		r := f.do(c.method, c.path, keyA, nil)
		if r.status != 405 || r.header.Get("Allow") != c.allow || !strings.Contains(string(r.body), `"kind":"method_not_allowed"`) {
			t.Errorf("%s %s: %d Allow=%q %s; want 405 Allow=%q", c.method, c.path, r.status, r.header.Get("Allow"), r.body, c.allow)
		}
	}
	if r := f.do("GET", "/v1/nothing", keyA, nil); r.status != 404 || !strings.Contains(string(r.body), `"kind":"not_found"`) {
		t.Errorf("an unknown path: %d %s", r.status, r.body)
	}
}

// Approvers list what waits for them; a tenant lists its own; nobody else
// sees anything; a tenant approving its own job is forbidden, not
// unauthenticated.
func TestListApprovals(t *testing.T) {
	f := newFixture(t)
	job := `{"kind":"starlark","situation":"internal","code":"result = 1"}`
	var req approvalReply
	f.do("POST", "/v1/approvals", keyA, job).decode(t, &req)
	var list []struct {
		Digest  string
		Tenant  string
		Display *struct{}
	}
	for _, key := range []string{keyApprover, keyA} {
		list = nil
		f.do("GET", "/v1/approvals", key, nil).decode(t, &list)
		if len(list) != 1 || list[0].Digest != req.Digest || list[0].Tenant != "a" || list[0].Display == nil {
			t.Errorf("pending approvals for %.12s…: %+v", key, list)
		}
	}
	list = nil
	f.do("GET", "/v1/approvals", keyB, nil).decode(t, &list)
	if len(list) != 0 {
		t.Errorf("tenant b sees a's pending approvals: %+v", list)
	}
	if r := f.do("GET", "/v1/approvals", "not-a-key", nil); r.status != 401 {
		t.Errorf("an unknown key: %d %s", r.status, r.body)
	}
	r := f.do("POST", "/v1/approvals/"+req.Digest+"/approve", keyA, nil)
	if r.status != 403 || !strings.Contains(string(r.body), `"kind":"forbidden"`) {
		t.Errorf("self-approval: %d %s", r.status, r.body)
	}
}

// Open sessions are listed for their tenant only, and a session whose
// tier refuses the tenant's default situation says so when opened.
func TestListSessionsAndWarning(t *testing.T) {
	f := newFixture(t)
	var open struct {
		ID, Tier, Warning string
	}
	r := f.do("POST", "/v1/sessions", keyA, `{"tier":"starlark"}`)
	r.decode(t, &open)
	if r.status != 201 || open.ID == "" {
		t.Fatalf("open: %d %s", r.status, r.body)
	}
	if open.Warning != "" {
		t.Errorf("a starlark session for a public tenant is fine, yet: %s", r.body)
	}
	var list []struct{ ID, Tier string }
	f.do("GET", "/v1/sessions", keyA, nil).decode(t, &list)
	if len(list) != 1 || list[0].ID != open.ID || list[0].Tier != "starlark" {
		t.Errorf("a's sessions: %+v", list)
	}
	list = nil
	f.do("GET", "/v1/sessions", keyB, nil).decode(t, &list)
	if len(list) != 0 {
		t.Errorf("b sees a's sessions: %+v", list)
	}
	if r := f.do("DELETE", "/v1/sessions/"+open.ID, keyA, nil); r.status != 204 {
		t.Errorf("close: %d %s", r.status, r.body)
	}
	// Tenant a runs as public by default, which needs level 4 for a
	// command: a session on the process tier (level 3) would refuse
	// every such run, and says so.
	if err := f.srv.Router().Unavailable("process"); err != nil {
		tiertest.Unavailable(t, "process", err)
	}
	r = f.do("POST", "/v1/sessions", keyA, `{"tier":"process"}`)
	r.decode(t, &open)
	if r.status != 201 || !strings.Contains(open.Warning, "a command job of situation public (the tenant's default) would be refused") {
		t.Errorf("a process session for a public tenant: %d %s", r.status, r.body)
	}
	f.do("DELETE", "/v1/sessions/"+open.ID, keyA, nil)
}
