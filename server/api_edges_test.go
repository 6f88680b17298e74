package server_test

import (
	"net/http"
	"os"
	"regexp"
	"slices"
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
	if r := f.do("GET", "/v1/approvals", keyApprover, nil); r.status != 200 || strings.TrimSpace(string(r.body)) != "[]" {
		t.Errorf("an approver's pending approvals, none: %d %s", r.status, r.body)
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
	var req, reqB approvalReply
	f.do("POST", "/v1/approvals", keyA, job).decode(t, &req)
	// b's pending job is neither a's nor its approver's to see.
	f.do("POST", "/v1/approvals", keyB, `{"kind":"starlark","situation":"internal","code":"result = 2"}`).decode(t, &reqB)
	if reqB.Digest == "" || reqB.Digest == req.Digest {
		t.Fatalf("b's approval request: %+v", reqB)
	}
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
	if len(list) != 1 || list[0].Digest != reqB.Digest || list[0].Tenant != "b" {
		t.Errorf("tenant b's pending approvals: %+v", list)
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

// TestWrongMethodEveryRoute: every endpoint of the HTTP API table in
// docs/server.md, called with a method the table does not list for its
// path, answers 405 in the API's error shape with Allow naming exactly
// the methods the table lists (so the table names every method too); the
// MCP endpoints take GET, POST and DELETE; the console's pages answer a
// wrong method with 405 and Allow in the console's own shape.
func TestWrongMethodEveryRoute(t *testing.T) {
	doc, err := os.ReadFile("../docs/server.md")
	if err != nil {
		t.Fatal(err)
	}
	_, api, _ := strings.Cut(string(doc), "## HTTP API\n")
	api, _, _ = strings.Cut(api, "\n\n")
	methods := map[string][]string{}
	row := regexp.MustCompile("^\\| `(GET|POST|DELETE) (/[^`]*)`")
	for _, line := range strings.Split(api, "\n") {
		if m := row.FindStringSubmatch(line); m != nil {
			path := regexp.MustCompile(`\{[a-z]+\}`).ReplaceAllString(m[2], "x1")
			methods[path] = append(methods[path], m[1])
		}
	}
	if len(methods) < 15 {
		t.Fatalf("read %d paths from the HTTP API table: %v", len(methods), methods)
	}
	methods["/mcp"] = []string{"GET", "POST", "DELETE"}
	methods["/mcp/wrapped/w1"] = []string{"GET", "POST", "DELETE"}
	f := newFixture(t)
	order := []string{"GET", "POST", "DELETE"}
	for path, ms := range methods {
		slices.SortFunc(ms, func(a, b string) int { return slices.Index(order, a) - slices.Index(order, b) })
		allow := strings.Join(ms, ", ")
		for _, method := range []string{"GET", "POST", "DELETE", "PUT", "PATCH"} {
			if slices.Contains(ms, method) {
				continue
			}
			r := f.do(method, path, keyA, nil)
			if r.status != 405 || r.header.Get("Allow") != allow || !strings.Contains(string(r.body), `"kind":"method_not_allowed"`) {
				t.Errorf("%s %s: %d Allow=%q %s; want 405 Allow=%q", method, path, r.status, r.header.Get("Allow"), r.body, allow)
			}
		}
	}
	for _, c := range []struct{ method, path, allow string }{
		{"POST", "/console/audit", "GET"},
		{"DELETE", "/console/approvals/x1", "GET, POST"},
		{"GET", "/console/signin", "POST"},
	} {
		r := f.do(c.method, c.path, "", nil)
		if r.status != 405 || r.header.Get("Allow") != c.allow || !strings.HasPrefix(r.header.Get("Content-Type"), "text/html") {
			t.Errorf("%s %s: %d Allow=%q %q; want 405 Allow=%q", c.method, c.path, r.status, r.header.Get("Allow"), r.header.Get("Content-Type"), c.allow)
		}
	}
	if r := f.do("GET", "/console/nothing", "", nil); r.status != 404 {
		t.Errorf("an unknown console page: %d", r.status)
	}
}

// Every JSON body is one object: anything after it is refused, as a
// job's is, not ignored.
func TestTrailingDataRefused(t *testing.T) {
	f := newFixture(t)
	for _, c := range []struct{ path, body string }{
		{"/v1/run", `{"kind":"expr","code":"1"} {"kind":"expr","code":"2"}`},
		{"/v1/explain", `{"kind":"expr","code":"1"}[]`},
		{"/v1/approvals", `{"kind":"expr","code":"1"}x`},
		{"/v1/sessions", `{"tier":"starlark"}{"tier":"starlark"}`},
		{"/v1/sessions", `{"tier":"starlark"} x`},
	} {
		r := f.do("POST", c.path, keyA, c.body)
		if r.status != 400 || !strings.Contains(string(r.body), `"invalid"`) || !strings.Contains(string(r.body), "trailing") {
			t.Errorf("POST %s %s: %d %s; want 400 invalid naming the trailing data", c.path, c.body, r.status, r.body)
		}
	}
}

// The Authorization scheme is matched without regard to case (RFC 7235),
// on the API as on /mcp.
func TestBearerSchemeAnyCase(t *testing.T) {
	f := newFixture(t)
	for h, want := range map[string]int{
		"Bearer " + keyA: 200, "bearer " + keyA: 200, "BEARER  " + keyA: 200,
		"Basic " + keyA: 401, "Bearer": 401, "Bearer ": 401, keyA: 401, "Bearerx " + keyA: 401,
	} {
		req, _ := http.NewRequest("GET", f.http.URL+"/v1/tiers", nil)
		req.Header.Set("Authorization", h)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Authorization: %.9s...: %d, want %d", h, resp.StatusCode, want)
		}
	}
}
