package server_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testing/tiertest"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/approve"
	"github.com/airlock-sandbox/airlock/server"
)

// approvedJob is an internal Starlark job, which the test configuration
// requires an approval for, with a file it loads.
const approvedJob = `{"kind":"starlark","situation":"internal","code":"load('lib.star', 'greet')\nresult = greet(name)","input":{"name":"world"},"files":{"lib.star":"def greet(n):\n    return 'hello ' + n\n"}}`

type approvalReply struct {
	Digest   string
	Tier     string
	Rule     string
	Required bool
	Job      *airlock.Job
	Token    string
	Expires  time.Time
}

func (f *fixture) approve(t *testing.T, key, job string) approvalReply {
	t.Helper()
	var req approvalReply
	r := f.do("POST", "/v1/approvals", key, job)
	r.decode(t, &req)
	if r.status != 200 || !req.Required || len(req.Digest) != 64 {
		t.Fatalf("request approval: %d %s", r.status, r.body)
	}
	var shown approvalReply
	f.do("GET", "/v1/approvals/"+req.Digest, keyApprover, nil).decode(t, &shown)
	if shown.Job == nil || shown.Job.Files["lib.star"] == "" {
		t.Fatalf("the approver cannot see the job: %+v", shown)
	}
	var tok approvalReply
	r = f.do("POST", "/v1/approvals/"+req.Digest+"/approve", keyApprover, nil)
	r.decode(t, &tok)
	if r.status != 200 || tok.Token == "" {
		t.Fatalf("approve: %d %s", r.status, r.body)
	}
	return tok
}

func expectStale(t *testing.T, r reply, want string) {
	t.Helper()
	if r.status != 403 || !strings.Contains(string(r.body), approve.Stale) || !strings.Contains(string(r.body), want) {
		t.Errorf("status %d %s; want 403 %s mentioning %q", r.status, r.body, approve.Stale, want)
	}
}

func TestApprovalBoundToTheExactJob(t *testing.T) {
	f := newFixture(t)
	// Without a token the job is refused, naming the rule and the digest.
	r := f.do("POST", "/v1/run", keyA, approvedJob)
	if r.status != 403 || !strings.Contains(string(r.body), approve.Required) || !strings.Contains(string(r.body), "internal-starlark") {
		t.Fatalf("unapproved: %d %s", r.status, r.body)
	}
	tok := f.approve(t, keyA, approvedJob)
	r = f.do("POST", "/v1/run", keyA, approvedJob, server.ApprovalHeader, tok.Token)
	if res := r.result(t); r.status != 200 || res.Value != "hello world" {
		t.Fatalf("approved run: %d %s", r.status, r.body)
	}

	t.Run("changed argument", func(t *testing.T) {
		job := strings.Replace(approvedJob, `"name":"world"`, `"name":"mallory"`, 1)
		expectStale(t, f.do("POST", "/v1/run", keyA, job, server.ApprovalHeader, tok.Token), "differs")
	})
	t.Run("changed code", func(t *testing.T) {
		job := strings.Replace(approvedJob, `greet(name)`, `greet(name) + '!'`, 1)
		expectStale(t, f.do("POST", "/v1/run", keyA, job, server.ApprovalHeader, tok.Token), "differs")
	})
	t.Run("swapped file content", func(t *testing.T) {
		job := strings.Replace(approvedJob, `'hello ' + n`, `'pwned ' + n`, 1)
		expectStale(t, f.do("POST", "/v1/run", keyA, job, server.ApprovalHeader, tok.Token), "differs")
	})
	t.Run("raised limit", func(t *testing.T) {
		job := strings.Replace(approvedJob, `"kind":"starlark"`, `"kind":"starlark","limits":{"steps":40000000}`, 1)
		expectStale(t, f.do("POST", "/v1/run", keyA, job, server.ApprovalHeader, tok.Token), "differs")
	})
	t.Run("another tenant's token", func(t *testing.T) {
		expectStale(t, f.do("POST", "/v1/run", keyB, approvedJob, server.ApprovalHeader, tok.Token), "another tenant")
	})
	t.Run("forged token", func(t *testing.T) {
		expectStale(t, f.do("POST", "/v1/run", keyA, approvedJob, server.ApprovalHeader, tok.Token+"x"), "not signed")
	})
	t.Run("expired token", func(t *testing.T) {
		f.clock.add(2 * time.Minute)
		defer f.clock.add(-2 * time.Minute)
		expectStale(t, f.do("POST", "/v1/run", keyA, approvedJob, server.ApprovalHeader, tok.Token), "expired")
	})
	t.Run("tenant cannot approve itself", func(t *testing.T) {
		var req approvalReply
		f.do("POST", "/v1/approvals", keyA, approvedJob).decode(t, &req)
		if r := f.do("POST", "/v1/approvals/"+req.Digest+"/approve", keyA, nil); r.status != 403 {
			t.Errorf("self-approval: %d %s", r.status, r.body)
		}
		// Anyone else learns nothing, not even that the approval exists.
		unknown := strings.Repeat("0", len(req.Digest))
		for _, key := range []string{keyB, ""} {
			r := f.do("POST", "/v1/approvals/"+req.Digest+"/approve", key, nil)
			u := f.do("POST", "/v1/approvals/"+unknown+"/approve", key, nil)
			if r.status != 404 || u.status != 404 || !strings.Contains(string(r.body), "no pending approval") {
				t.Errorf("approval by key %q: %d %s; an unknown digest: %d", key, r.status, r.body, u.status)
			}
		}
	})
	t.Run("session run", func(t *testing.T) {
		var open struct{ ID string }
		f.do("POST", "/v1/sessions", keyA, `{"tier":"starlark"}`).decode(t, &open)
		path := "/v1/sessions/" + open.ID + "/run"
		if r := f.do("POST", path, keyA, approvedJob); r.status != 403 || !strings.Contains(string(r.body), approve.Required) {
			t.Errorf("unapproved session run: %d %s", r.status, r.body)
		}
		// A token approved for a plain run does not hold in a session.
		expectStale(t, f.do("POST", path, keyA, approvedJob, server.ApprovalHeader, tok.Token), "differs")
		// One approved for this session does, and in no other session.
		inSession := strings.Replace(approvedJob, `{"kind"`, `{"session":"`+open.ID+`","kind"`, 1)
		stok := f.approve(t, keyA, inSession)
		if r := f.do("POST", path, keyA, approvedJob, server.ApprovalHeader, stok.Token); r.status != 200 {
			t.Errorf("session run approved for the session: %d %s", r.status, r.body)
		}
		var other struct{ ID string }
		f.do("POST", "/v1/sessions", keyA, `{"tier":"starlark"}`).decode(t, &other)
		expectStale(t, f.do("POST", "/v1/sessions/"+other.ID+"/run", keyA, approvedJob, server.ApprovalHeader, stok.Token), "differs")
		// A session of another tenant is not found, not approved.
		if r := f.do("POST", "/v1/approvals", keyB, inSession); r.status != 404 {
			t.Errorf("approval for another tenant's session: %d %s", r.status, r.body)
		}
	})
	// Every approved run is audited with the rule that required it.
	var recs []server.Record
	f.do("GET", "/v1/audit", keyA, nil).decode(t, &recs)
	var approved int
	for _, rec := range recs {
		if rec.Approval == "internal-starlark" && rec.Outcome == "ok" {
			approved++
		}
	}
	if approved != 2 {
		t.Errorf("%d audited approved runs, want 2", approved)
	}
	// So is every refused attempt of a, with the reason (b's attempt is in
	// b's trail).
	var stale int
	for _, rec := range recs {
		if rec.Outcome == "refused_not_admitted" && strings.Contains(rec.Error, approve.Stale) {
			stale++
		}
	}
	if stale != 8 {
		t.Errorf("%d audited stale attempts, want 8", stale)
	}
}

func TestJobsWithoutRuleNeedNoApproval(t *testing.T) {
	f := newFixture(t)
	var req approvalReply
	f.do("POST", "/v1/approvals", keyA, `{"kind":"expr","code":"1"}`).decode(t, &req)
	if req.Required || req.Rule != "" || len(req.Digest) != 64 {
		t.Errorf("expr approval request: %+v", req)
	}
	if r := f.do("GET", "/v1/approvals/"+req.Digest, keyApprover, nil); r.status != 404 {
		t.Errorf("a job that needs no approval is pending: %d", r.status)
	}
}

func TestPendingApprovalsAreBoundedPerTenant(t *testing.T) {
	f := newFixture(t)
	var last reply
	for i := 0; i < 300; i++ {
		last = f.do("POST", "/v1/approvals", keyA, fmt.Sprintf(`{"kind":"starlark","code":"result = %d","situation":"internal"}`, i))
		if last.status != 200 {
			break
		}
	}
	if last.status != 429 || last.header.Get("Retry-After") == "" {
		t.Fatalf("300 pending approvals: last status %d", last.status)
	}
	// Another tenant is not crowded out.
	f2 := f.do("POST", "/v1/approvals", keyB, `{"kind":"starlark","code":"result = 1","situation":"internal"}`)
	if f2.status != 200 {
		t.Errorf("tenant b after a filled its share: %d %s", f2.status, f2.body)
	}
}

// An approved command runs on an OS tier; a swapped file or argument is
// refused before anything runs. (The re-check over the placed files needs
// the tier to call airlock.CheckPlaced; see docs/server.md.)
func TestApprovedCommand(t *testing.T) {
	f := newFixture(t, func(c *server.Config) {
		rules := append(*c.Approvals.Rules, approve.Rule{Name: "internal-command", Kinds: []airlock.Kind{airlock.KindCommand}, Situations: []airlock.Situation{airlock.SituationInternal}})
		c.Approvals.Rules = &rules
	})
	if err := f.srv.Router().Unavailable("gvisor"); err != nil {
		tiertest.Unavailable(t, "gvisor", err)
	}
	job := `{"kind":"command","situation":"internal","argv":["sh","run.sh","world"],"files":{"run.sh":"echo hello $1\n","lib/x":"data"}}`
	var req approvalReply
	f.do("POST", "/v1/approvals", keyA, job).decode(t, &req)
	if !req.Required || req.Rule != "internal-command" {
		t.Fatalf("approval request: %+v", req)
	}
	var tok approvalReply
	f.do("POST", "/v1/approvals/"+req.Digest+"/approve", keyApprover, nil).decode(t, &tok)
	r := f.do("POST", "/v1/run", keyA, job, server.ApprovalHeader, tok.Token)
	if res := r.result(t); r.status != 200 || res.Stdout != "hello world\n" {
		t.Fatalf("approved command: %d %s", r.status, r.body)
	}
	swapped := strings.Replace(job, `echo hello $1`, `cat /etc/shadow; echo hello $1`, 1)
	expectStale(t, f.do("POST", "/v1/run", keyA, swapped, server.ApprovalHeader, tok.Token), "differs")
	argv := strings.Replace(job, `"world"`, `"mallory"`, 1)
	expectStale(t, f.do("POST", "/v1/run", keyA, argv, server.ApprovalHeader, tok.Token), "differs")
}

// Whether a job was asked for, is pending or was decided is told only to
// its tenant and its approvers: to anyone else (another tenant, another
// tenant's approver, no key) every approval endpoint answers a decided
// digest exactly as one nobody asked for. A digest can be computed for a
// guessed job.
func TestApprovalsTellOthersNothing(t *testing.T) {
	f := newFixture(t, func(c *server.Config) {
		c.Tenants[1].ApproverSHA256 = []string{server.HashKey("test-key-approver-b-0123456789abcd")}
	})
	d := f.requestApproval(keyA, starlarkJob("result = 7"))
	if r := f.do("POST", "/v1/approvals/"+string(d)+"/approve", keyApprover, nil); r.status != 200 {
		t.Fatalf("approve: %d %s", r.status, r.body)
	}
	unknown := strings.Repeat("0", 64)
	for _, key := range []string{keyB, "test-key-approver-b-0123456789abcd", "", "not-a-key"} {
		for _, ep := range []struct{ method, path string }{
			{"GET", "/v1/approvals/%s"},
			{"GET", "/v1/approvals/%s/decision"},
			{"POST", "/v1/approvals/%s/approve"},
		} {
			got := f.do(ep.method, fmt.Sprintf(ep.path, d), key, nil)
			none := f.do(ep.method, fmt.Sprintf(ep.path, unknown), key, nil)
			norm := strings.ReplaceAll(string(got.body), string(d), unknown)
			if got.status != none.status || norm != string(none.body) {
				t.Errorf("%s %s with key %q: a decided digest answers %d %s, one nobody asked for %d %s",
					ep.method, ep.path, key, got.status, got.body, none.status, none.body)
			}
		}
	}
}

// Pending jobs are bounded in bytes as well as in number: a job may be
// 32 MiB, and 256 of them per tenant would take gigabytes of the
// server's memory until they expire. Another tenant still gets its own.
func TestPendingApprovalsBoundedInBytes(t *testing.T) {
	f := newFixture(t)
	big := strings.Repeat("x", 25<<20)
	ask := func(key string, i int) reply {
		job := starlarkJob(fmt.Sprintf("result = %d", i))
		job.Files = map[string]string{"data.txt": big}
		return f.do("POST", "/v1/approvals", key, job)
	}
	for i := range 3 {
		if r := ask(keyA, i); r.status != 200 {
			t.Fatalf("pending job %d of 25 MiB: %d %.300s", i, r.status, r.body)
		}
	}
	r := ask(keyA, 3)
	if r.status != 429 || r.header.Get("Retry-After") == "" {
		t.Errorf("a fourth pending job of 25 MiB: %d %.300s; want 429 with Retry-After", r.status, r.body)
	}
	if r := ask(keyB, 0); r.status != 200 {
		t.Errorf("tenant b's pending job was refused for a's: %d %.300s", r.status, r.body)
	}
}

// A whole float in the input is another value than the integer json.Marshal
// writes the same way: the program sees a float, so a token for n = 1 does
// not hold for n = 1.0, and the approver is shown which one it is.
func TestApprovalBindsNumberTypes(t *testing.T) {
	f := newFixture(t)
	job := func(n string) string {
		return `{"kind":"starlark","situation":"internal","code":"result = type(n) + ' ' + str(m)","input":{"n":` + n + `,"m":[` + n + `]}}`
	}
	var req, tok approvalReply
	f.do("POST", "/v1/approvals", keyA, job("1")).decode(t, &req)
	f.do("POST", "/v1/approvals/"+req.Digest+"/approve", keyApprover, nil).decode(t, &tok)
	if tok.Token == "" {
		t.Fatalf("no token for %+v", req)
	}
	expectStale(t, f.do("POST", "/v1/run", keyA, job("1.0"), server.ApprovalHeader, tok.Token), "differs")
	if r := f.do("POST", "/v1/run", keyA, job("1"), server.ApprovalHeader, tok.Token); r.status != 200 || r.result(t).Value != "int [1]" {
		t.Fatalf("approved run: %d %s", r.status, r.body)
	}

	var float approvalReply
	f.do("POST", "/v1/approvals", keyA, job("1.0")).decode(t, &float)
	if float.Digest == req.Digest {
		t.Errorf("n = 1.0 has the digest of n = 1")
	}
	r := f.do("GET", "/v1/approvals/"+float.Digest, keyApprover, nil)
	if !strings.Contains(string(r.body), `"display":`) || !strings.Contains(string(r.body[strings.Index(string(r.body), `"display":`):]), `"input":{"m":[1.0],"n":1.0}`) {
		t.Errorf("the approver is not shown n = 1.0: %s", r.body)
	}
}

// A pinned clock's offset is part of what the program reads (time.now()
// keeps it: its hour, its text), so a token for one offset does not hold
// for the same instant written with another.
func TestApprovalBindsTheClockOffset(t *testing.T) {
	f := newFixture(t)
	job := func(clock string) string {
		return `{"kind":"starlark","situation":"internal","code":"result = str(time.now().hour)","clock":"` + clock + `"}`
	}
	var req, tok approvalReply
	f.do("POST", "/v1/approvals", keyA, job("2026-01-01T00:00:00Z")).decode(t, &req)
	f.do("POST", "/v1/approvals/"+req.Digest+"/approve", keyApprover, nil).decode(t, &tok)
	if tok.Token == "" {
		t.Fatalf("no token for %+v", req)
	}
	expectStale(t, f.do("POST", "/v1/run", keyA, job("2026-01-01T05:00:00+05:00"), server.ApprovalHeader, tok.Token), "differs")
	if r := f.do("POST", "/v1/run", keyA, job("2026-01-01T00:00:00Z"), server.ApprovalHeader, tok.Token); r.status != 200 || r.result(t).Value != "0" {
		t.Fatalf("approved run: %d %s", r.status, r.body)
	}
	var other approvalReply
	f.do("POST", "/v1/approvals", keyA, job("2026-01-01T05:00:00+05:00")).decode(t, &other)
	if r := f.do("GET", "/v1/approvals/"+other.Digest, keyApprover, nil); !strings.Contains(string(r.body), `"clock":"2026-01-01T05:00:00+05:00"`) {
		t.Errorf("the approver is not shown the clock's offset: %s", r.body)
	}
}
