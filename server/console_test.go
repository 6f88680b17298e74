package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/approve"
	"github.com/airlock-sandbox/airlock/server"
)

const keyApproverB = "test-key-approver-b-0123456789abcd"

// consoleConfig is the test configuration with a rule that every command
// job needs approval, and an approver for tenant b who is not tenant a's.
func consoleConfig(cfg *server.Config) {
	rules := append(*cfg.Approvals.Rules, approve.Rule{Name: "commands", Kinds: []airlock.Kind{airlock.KindCommand}})
	cfg.Approvals.Rules = &rules
	cfg.Tenants[1].ApproverSHA256 = []string{server.HashKey(keyApproverB)}
}

// commandJob is a job the process tier runs, which needs approval.
func commandJob(argv []string, files map[string]string) airlock.Job {
	return airlock.Job{Kind: airlock.KindCommand, Tier: "process", Situation: airlock.SituationInternal, Argv: argv, Files: files}
}

// starlarkJob needs approval under testConfig's internal-starlark rule,
// and runs on every machine.
func starlarkJob(code string) airlock.Job {
	return airlock.Job{Kind: airlock.KindStarlark, Situation: airlock.SituationInternal, Code: code}
}

// requestApproval submits job for approval as the agent of key, and
// returns its digest.
func (f *fixture) requestApproval(key string, job airlock.Job) approve.Digest {
	f.t.Helper()
	r := f.do("POST", "/v1/approvals", key, job)
	var ar struct {
		Digest   approve.Digest `json:"digest"`
		Required bool           `json:"required"`
	}
	r.decode(f.t, &ar)
	if r.status != 200 || !ar.Required {
		f.t.Fatalf("approval request: status %d: %s", r.status, r.body)
	}
	return ar.Digest
}

// decision fetches what became of a job's approval, as its agent does.
func (f *fixture) decision(key string, d approve.Digest) (status, token string) {
	f.t.Helper()
	r := f.do("GET", "/v1/approvals/"+string(d)+"/decision", key, nil)
	var out struct{ Status, Token string }
	r.decode(f.t, &out)
	if r.status != 200 {
		f.t.Fatalf("decision: status %d: %s", r.status, r.body)
	}
	return out.Status, out.Token
}

// auditRecords parses the trail written so far.
func (f *fixture) auditRecords() []server.Record {
	f.t.Helper()
	var out []server.Record
	for _, l := range f.audit.Lines() {
		if l == "" {
			continue
		}
		rec, err := server.ParseRecord([]byte(l))
		if err != nil {
			f.t.Fatal(err)
		}
		out = append(out, rec)
	}
	return out
}

// consoleUser is an approver's HTTP client of the console, with its
// cookies.
type consoleUser struct {
	f      *fixture
	client *http.Client
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func (f *fixture) signIn(key string) *consoleUser {
	f.t.Helper()
	jar, _ := cookiejar.New(nil)
	u := &consoleUser{f: f, client: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	status, page, _ := u.get("/console/")
	m := csrfField.FindStringSubmatch(page)
	if status != 200 || m == nil {
		f.t.Fatalf("sign-in page: %d %s", status, page)
	}
	status, body, h := u.post("/console/signin", url.Values{"csrf": {m[1]}, "key": {key}}, "Origin", f.http.URL)
	if status != http.StatusSeeOther {
		f.t.Fatalf("sign in: %d %v %s", status, h, body)
	}
	return u
}

func (u *consoleUser) get(path string) (int, string, http.Header) {
	u.f.t.Helper()
	resp, err := u.client.Get(u.f.http.URL + path)
	if err != nil {
		u.f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func (u *consoleUser) post(path string, form url.Values, header ...string) (int, string, http.Header) {
	u.f.t.Helper()
	req, _ := http.NewRequestWithContext(context.Background(), "POST", u.f.http.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := u.client.Do(req)
	if err != nil {
		u.f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// csrf reads the session's CSRF token from a console page.
func (u *consoleUser) csrf() string {
	u.f.t.Helper()
	_, page, _ := u.get("/console/")
	m := csrfField.FindStringSubmatch(page)
	if m == nil {
		u.f.t.Fatalf("no CSRF token on %s", page)
	}
	return m[1]
}

// TestConsoleHeadersAndCookies: every console response carries the
// strict CSP and its companions; the session cookie is HttpOnly and
// SameSite=Strict; signing out ends the session.
func TestConsoleHeadersAndCookies(t *testing.T) {
	f := newFixture(t, consoleConfig)
	if resp, err := http.Get(f.http.URL + "/console/static/"); err != nil || resp.StatusCode != 404 {
		t.Errorf("the static directory is listed: %v %v", resp.StatusCode, err)
	} else {
		resp.Body.Close()
	}
	for _, path := range []string{"/console/", "/console/static/console.css", "/console/static/console.js", "/console/nowhere", "/console/audit"} {
		resp, err := http.Get(f.http.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		h := resp.Header
		csp := h.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'self'", "frame-ancestors 'none'", "form-action 'self'", "script-src 'self'", "style-src 'self'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("%s: CSP %q lacks %q", path, csp, want)
			}
		}
		if strings.Contains(csp, "unsafe-inline") || h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Referrer-Policy") != "no-referrer" {
			t.Errorf("%s: headers %v", path, h)
		}
	}
	u := f.signIn(keyApprover)
	var sess *http.Cookie
	resp, _ := u.client.Get(f.http.URL + "/console/")
	resp.Body.Close()
	jarURL, _ := url.Parse(f.http.URL + "/console/")
	for _, c := range u.client.Jar.Cookies(jarURL) {
		if c.Name == "airlock_console" {
			sess = c
		}
	}
	if sess == nil {
		t.Fatal("no session cookie")
	}
	// The jar does not keep attributes: read them from a fresh sign-in.
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	r0, _ := c.Get(f.http.URL + "/console/")
	b0, _ := io.ReadAll(r0.Body)
	r0.Body.Close()
	req, _ := http.NewRequest("POST", f.http.URL+"/console/signin", strings.NewReader(url.Values{"csrf": {csrfField.FindStringSubmatch(string(b0))[1]}, "key": {keyApprover}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r1, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r1.Body.Close()
	set := strings.Join(r1.Header.Values("Set-Cookie"), "\n")
	if !regexp.MustCompile(`airlock_console=[^;]+;.*HttpOnly.*SameSite=Strict`).MatchString(set) {
		t.Errorf("session cookie attributes: %s", set)
	}
	// A second decision of the same job is refused.
	d := f.requestApproval(keyA, starlarkJob("1"))
	tok := u.csrf()
	for i, want := range []int{http.StatusSeeOther, http.StatusOK} {
		status, body, _ := u.post("/console/approvals/"+string(d), url.Values{"csrf": {tok}, "decision": {"deny"}, "reason": {"r"}}, "Origin", f.http.URL)
		if status != want || i == 1 && !strings.Contains(body, "already decided") {
			t.Errorf("decision %d: %d", i, status)
		}
	}
	status, body, _ := u.post("/console/signout", url.Values{"csrf": {u.csrf()}}, "Origin", f.http.URL)
	if status != http.StatusSeeOther {
		t.Fatalf("sign out: %d %s", status, body)
	}
	if _, page, _ := u.get("/console/"); !strings.Contains(page, "Approver key") {
		t.Errorf("after sign-out the console still shows: %s", page)
	}
	// Sessions expire.
	u = f.signIn(keyApprover)
	if _, page, _ := u.get("/console/"); !strings.Contains(page, "Pending approvals") {
		t.Fatalf("signed in: %s", page)
	}
	f.clock.add(9 * time.Hour)
	if _, page, _ := u.get("/console/"); !strings.Contains(page, "Approver key") {
		t.Errorf("an expired session still shows the console: %s", page)
	}
	// Over TLS the cookie is Secure.
	ts := httptest.NewTLSServer(f.srv.Handler())
	defer ts.Close()
	tc := ts.Client()
	tc.Jar, _ = cookiejar.New(nil)
	tc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	r2, err := tc.Get(ts.URL + "/console/")
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := io.ReadAll(r2.Body)
	r2.Body.Close()
	req, _ = http.NewRequest("POST", ts.URL+"/console/signin", strings.NewReader(url.Values{"csrf": {csrfField.FindStringSubmatch(string(b2))[1]}, "key": {keyApprover}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", ts.URL)
	r3, err := tc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r3.Body.Close()
	if set := strings.Join(r3.Header.Values("Set-Cookie"), "\n"); r3.StatusCode != http.StatusSeeOther || !regexp.MustCompile(`airlock_console=[^;]+;.*Secure`).MatchString(set) {
		t.Errorf("over TLS: %d %s", r3.StatusCode, set)
	}
	// Behind a proxy that ends TLS: the page's origin is https, the
	// request plain HTTP saying X-Forwarded-Proto: https.
	jar2, _ := cookiejar.New(nil)
	pc := &http.Client{Jar: jar2, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	r4, _ := pc.Get(f.http.URL + "/console/")
	b4, _ := io.ReadAll(r4.Body)
	r4.Body.Close()
	req, _ = http.NewRequest("POST", f.http.URL+"/console/signin", strings.NewReader(url.Values{"csrf": {csrfField.FindStringSubmatch(string(b4))[1]}, "key": {keyApprover}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", strings.Replace(f.http.URL, "http:", "https:", 1))
	req.Header.Set("X-Forwarded-Proto", "https")
	r5, err := pc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r5.Body.Close()
	if set := strings.Join(r5.Header.Values("Set-Cookie"), "\n"); r5.StatusCode != http.StatusSeeOther || !regexp.MustCompile(`airlock_console=[^;]+;.*Secure`).MatchString(set) {
		t.Errorf("behind a TLS proxy: %d %s", r5.StatusCode, set)
	}
}

// TestConsoleRefusesCrossSite: a decision posted from another origin, or
// without the session's CSRF token, is refused; an approver's session
// cannot see or decide another tenant's jobs; a wrong key does not sign
// in.
func TestConsoleRefusesCrossSite(t *testing.T) {
	f := newFixture(t, consoleConfig)
	d := f.requestApproval(keyA, starlarkJob("1"))
	dB := f.requestApproval(keyB, starlarkJob("2"))
	u := f.signIn(keyApprover)
	tok := u.csrf()
	good := url.Values{"csrf": {tok}, "decision": {"approve"}, "reason": {"fine"}}
	for _, c := range []struct {
		name   string
		form   url.Values
		header []string
	}{
		{"another origin", good, []string{"Origin", "http://evil.example"}},
		{"another port", good, []string{"Origin", "http://127.0.0.1:1"}},
		{"cross-site fetch metadata", good, []string{"Sec-Fetch-Site", "cross-site"}},
		{"no CSRF token", url.Values{"decision": {"approve"}, "reason": {"fine"}}, []string{"Origin", f.http.URL}},
		{"a wrong CSRF token", url.Values{"csrf": {tok + "x"}, "decision": {"approve"}, "reason": {"fine"}}, []string{"Origin", f.http.URL}},
	} {
		status, body, _ := u.post("/console/approvals/"+string(d), c.form, c.header...)
		if status != http.StatusForbidden || !strings.Contains(body, "Refused") {
			t.Errorf("%s: status %d: %s", c.name, status, body)
		}
	}
	if st, _ := f.decision(keyA, d); st != "pending" {
		t.Fatalf("a refused post decided the job: %s", st)
	}
	// Tenant b's job: approver a's cookie neither sees nor decides it.
	if status, _, _ := u.get("/console/approvals/" + string(dB)); status != http.StatusNotFound {
		t.Errorf("approver a sees tenant b's job: %d", status)
	}
	if _, page, _ := u.get("/console/"); strings.Contains(page, string(dB)) || !strings.Contains(page, string(d)) {
		t.Errorf("approver a's list: %s", page)
	}
	status, body, _ := u.post("/console/approvals/"+string(dB), good, "Origin", f.http.URL)
	if status != http.StatusNotFound {
		t.Errorf("approver a decided tenant b's job: %d %s", status, body)
	}
	if st, _ := f.decision(keyB, dB); st != "pending" {
		t.Errorf("tenant b's job: %s", st)
	}
	// A sign-in from another origin, or with a key that approves nothing.
	jar, _ := cookiejar.New(nil)
	anon := &consoleUser{f: f, client: &http.Client{Jar: jar}}
	_, page, _ := anon.get("/console/")
	pre := csrfField.FindStringSubmatch(page)[1]
	if status, _, _ := anon.post("/console/signin", url.Values{"csrf": {pre}, "key": {keyApprover}}, "Origin", "http://evil.example"); status != http.StatusForbidden {
		t.Errorf("cross-site sign-in: %d", status)
	}
	if status, body, _ := anon.post("/console/signin", url.Values{"csrf": {pre}, "key": {keyA}}, "Origin", f.http.URL); status != http.StatusForbidden || !strings.Contains(body, "approves for no tenant") {
		t.Errorf("a tenant key signed in: %d %s", status, body)
	}
	// The decision endpoint tells tenant b nothing of tenant a's job.
	if r := f.do("GET", "/v1/approvals/"+string(d)+"/decision", keyB, nil); r.status != http.StatusNotFound {
		t.Errorf("tenant b reads tenant a's decision: %d %s", r.status, r.body)
	}
}

// TestConsoleDecisionWithoutJS approves and denies with plain form posts
// (no script), and checks the trail and the agent's view.
func TestConsoleDecisionWithoutJS(t *testing.T) {
	f := newFixture(t, consoleConfig)
	job := starlarkJob("1 + 1")
	d := f.requestApproval(keyA, job)
	dDeny := f.requestApproval(keyA, starlarkJob("2 + 2"))
	u := f.signIn(keyApprover)
	tok := u.csrf()
	if status, body, _ := u.post("/console/approvals/"+string(d), url.Values{"csrf": {tok}, "decision": {"approve"}}, "Origin", f.http.URL); status != 200 || !strings.Contains(body, "A reason is required") {
		t.Errorf("approve without a reason: %d", status)
	}
	if status, _, h := u.post("/console/approvals/"+string(d), url.Values{"csrf": {tok}, "decision": {"approve"}, "reason": {"reviewed: adds numbers"}}, "Origin", f.http.URL); status != http.StatusSeeOther {
		t.Fatalf("approve: %d %v", status, h)
	}
	if status, _, _ := u.post("/console/approvals/"+string(dDeny), url.Values{"csrf": {tok}, "decision": {"deny"}, "reason": {"not today"}}, "Origin", f.http.URL); status != http.StatusSeeOther {
		t.Fatalf("deny: %d", status)
	}
	if st, token := f.decision(keyA, dDeny); st != "denied" || token != "" {
		t.Errorf("denied job: %s %q", st, token)
	}
	st, token := f.decision(keyA, d)
	if st != "approved" || token == "" {
		t.Fatalf("approved job: %s", st)
	}
	r := f.do("POST", "/v1/run", keyA, job, server.ApprovalHeader, token)
	if r.status != 200 {
		t.Fatalf("run with the token: %d %s", r.status, r.body)
	}
	var decided, ran bool
	for _, rec := range f.auditRecords() {
		switch {
		case rec.Request == "approval" && rec.Digest == d:
			decided = rec.Outcome == "approved" && rec.Reason == "reviewed: adds numbers" && strings.HasPrefix(rec.Approver, "approver:")
		case rec.Request == "approval" && rec.Digest == dDeny:
			if rec.Outcome != "denied" || rec.Reason != "not today" {
				t.Errorf("deny record: %+v", rec)
			}
		case rec.Request == "run" && rec.Digest == d:
			ran = rec.Outcome == "ok" && rec.Reason == "reviewed: adds numbers" && rec.Approver != ""
		}
	}
	if !decided || !ran {
		t.Errorf("trail lacks the decision (%v) or the run's approver (%v):\n%s", decided, ran, strings.Join(f.audit.Lines(), "\n"))
	}
	// The decided job has left the list; its page shows the decision and
	// the run; the audit page finds it.
	if _, page, _ := u.get("/console/"); strings.Contains(page, string(d)) {
		t.Error("a decided job is still listed")
	}
	_, page, _ := u.get("/console/approvals/" + string(d))
	if !strings.Contains(page, "reviewed: adds numbers") || !strings.Contains(page, "/console/runs/") {
		t.Errorf("decided job's page: %s", page)
	}
	// The run's page gives the replay command, and the record downloads
	// as the one audit line replay reads.
	run := regexp.MustCompile(`/console/runs/(\d+)`).FindStringSubmatch(page)
	_, runPage, _ := u.get(run[0])
	if !strings.Contains(runPage, "airlock replay airlock-record-"+run[1]+".jsonl") {
		t.Errorf("run page lacks the replay command: %s", runPage)
	}
	status, line, h := u.get(run[0] + "/record")
	if rec, err := server.ParseRecord([]byte(line)); status != 200 || err != nil || rec.Digest != d || rec.Job == nil || !strings.HasPrefix(h.Get("Content-Disposition"), "attachment") {
		t.Errorf("record download: %d %v %v: %s", status, err, h, line)
	}
	_, page, _ = u.get("/console/audit?tenant=a&outcome=approved")
	if !strings.Contains(page, "approved") || strings.Contains(page, ">denied<") {
		t.Errorf("audit search: %s", page)
	}
	if !strings.Contains(page, "<svg") || !strings.Contains(page, "µs") {
		t.Errorf("audit page has no latency chart: %s", page)
	}
	// A new job of the same kind is shown as a diff against the one
	// approved.
	d4 := f.requestApproval(keyA, starlarkJob("1 + 1\nprint(2)"))
	_, page, _ = u.get("/console/approvals/" + string(d4))
	if !strings.Contains(page, `<span class="dadd">&#43; code: print(2)</span>`) || !strings.Contains(page, `<span class="dsame">  code: 1 &#43; 1</span>`) {
		i := strings.Index(page, "Changes since")
		t.Errorf("no diff against the approved job: %s", page[i:])
	}
	// A JSON approval records its approver too.
	d3 := f.requestApproval(keyA, starlarkJob("3"))
	if r := f.do("POST", "/v1/approvals/"+string(d3)+"/approve", keyApprover, nil); r.status != 200 {
		t.Fatalf("JSON approve: %d %s", r.status, r.body)
	}
	var api server.Record
	for _, rec := range f.auditRecords() {
		if rec.Digest == d3 {
			api = rec
		}
	}
	if api.Outcome != "approved" || !strings.HasPrefix(api.Approver, "approver:") {
		t.Errorf("JSON approval record: %+v", api)
	}
	var tokenAnswer struct{ Token string }
	_ = json.Unmarshal(f.do("GET", "/v1/approvals/"+string(d3)+"/decision", keyA, nil).body, &tokenAnswer)
	if tokenAnswer.Token == "" {
		t.Error("the agent cannot fetch a token approved over the API")
	}
}

// A console session holds a few event streams at once, not any number:
// each holds a connection for minutes.
func TestConsoleEventStreamsBounded(t *testing.T) {
	f := newFixture(t)
	u := f.signIn(keyApprover)
	open := func() *http.Response {
		t.Helper()
		resp, err := u.client.Get(f.http.URL + "/console/events")
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	var streams []*http.Response
	defer func() {
		for _, r := range streams {
			r.Body.Close()
		}
	}()
	for i := range server.MaxConsoleStreams {
		r := open()
		streams = append(streams, r)
		if r.StatusCode != 200 {
			t.Fatalf("stream %d: %d", i, r.StatusCode)
		}
		buf := make([]byte, 5)
		if _, err := io.ReadFull(r.Body, buf); err != nil { // the stream is served
			t.Fatal(err)
		}
	}
	r := open()
	r.Body.Close()
	if r.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("stream %d of one session: %d, want 429", server.MaxConsoleStreams+1, r.StatusCode)
	}
	streams[0].Body.Close()
	streams = streams[1:]
	for deadline := time.Now().Add(30 * time.Second); ; {
		r := open()
		if r.StatusCode == 200 {
			streams = append(streams, r)
			break
		}
		r.Body.Close()
		if time.Now().After(deadline) {
			t.Fatalf("after one stream ended a new one is still refused: %d", r.StatusCode)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestConsoleShowsTheInput: the detail page shows everything the digest
// binds that the program reads: the input, each value with its type (the
// string "1", the integer 1 and the float 1.0 differ), each key in its own
// element, escaped; a pinned clock and seed. The diff lists them too.
func TestConsoleShowsTheInput(t *testing.T) {
	f := newFixture(t, consoleConfig)
	base := starlarkJob("result = url")
	base.Input = map[string]any{"url": "https://example.com/"}
	f.requestApproval(keyA, base)
	u := f.signIn(keyApprover)
	var first approve.Digest
	for _, p := range []string{"/console/"} {
		_, page, _ := u.get(p)
		m := regexp.MustCompile(`/console/approvals/([0-9a-f]{64})`).FindStringSubmatch(page)
		if m == nil {
			t.Fatalf("no pending job on %s", page)
		}
		first = approve.Digest(m[1])
	}
	if st, body, _ := u.post("/console/approvals/"+string(first), url.Values{"csrf": {u.csrf()}, "decision": {"approve"}, "reason": {"ok"}}, "Origin", f.http.URL); st != http.StatusSeeOther {
		t.Fatalf("approve: %d %s", st, body)
	}
	body := `{"kind":"starlark","situation":"internal","code":"result = url","seed":7,"clock":"2026-01-02T03:04:05Z",` +
		`"input":{"url":"https://evil.example/?q=<b>\u202e","n":1.0,"i":1,"s":"1","list":[true,null,{"a.b":2}],"empty":[]}}`
	r := f.do("POST", "/v1/approvals", keyA, body)
	var ar struct{ Digest string }
	r.decode(t, &ar)
	status, page, _ := u.get("/console/approvals/" + ar.Digest)
	if status != 200 {
		t.Fatalf("detail page: %d %s", status, page)
	}
	for _, want := range []string{
		`<code class="key">url</code></td><td>text</td><td><span class="val flagged">https://evil.example/?q=&lt;b&gt;\u202e</span>`,
		`<code class="key">n</code></td><td>float</td><td><span class="val">1.0</span>`,
		`<code class="key">i</code></td><td>integer</td><td><span class="val">1</span>`,
		`<code class="key">s</code></td><td>text</td><td><span class="val">1</span>`,
		`<code class="key">list</code><span class="idx">[0]</span></td><td>boolean</td>`,
		`<code class="key">list</code><span class="idx">[1]</span></td><td>null</td>`,
		`<code class="key">list</code><span class="idx">[2]</span><code class="key">a.b</code></td><td>integer</td><td><span class="val">2</span>`,
		`<code class="key">empty</code></td><td>list</td>`,
		`pinned to 2026-01-02T03:04:05Z`, `pinned to 7`,
		`<span class="ddel">- input[&#34;url&#34;] (text): https://example.com/</span>`,
		`<span class="dadd">&#43; input[&#34;n&#34;] (float): 1.0</span>`,
		`<span class="dadd">&#43; seed: 7</span>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the detail page lacks %s", want)
		}
	}
	if t.Failed() {
		t.Logf("page: %s", page)
	}
}

// TestImageNotASCIIReachesNoApprover: a job's image reference is the
// tenant's text; one with a bidirectional override (shown to an approver
// as another name) or another hidden character is refused as invalid when
// its approval is asked for or it is run, so no console page or record
// ever shows it.
func TestImageNotASCIIReachesNoApprover(t *testing.T) {
	f := newFixture(t)
	job := commandJob([]string{"true"}, nil)
	for _, img := range []string{"py\u202enohty", "pyth\u200bon", "l\u043ecalhost/tool:1"} {
		job.Image = img
		for _, path := range []string{"/v1/approvals", "/v1/run"} {
			r := f.do("POST", path, keyA, job)
			if r.status != 400 || !strings.Contains(string(r.body), `"invalid"`) || !strings.Contains(string(r.body), "image") {
				t.Errorf("%s with image %q: %d %s, want 400 invalid naming the image", path, img, r.status, r.body)
			}
		}
	}
}

// TestConsoleListIsCheap: the pending list is fetched again by every
// approver's page on every change, and a change is one approval request
// away for a tenant: the list must not digest every pending job's content
// each time (96 MiB of a tenant's jobs here), only once per job.
func TestConsoleListIsCheap(t *testing.T) {
	f := newFixture(t, consoleConfig)
	for i := range 11 {
		job := starlarkJob(fmt.Sprintf("result = %d", i))
		job.Files = map[string]string{"data.txt": strings.Repeat(fmt.Sprint(i%10), 8<<20)}
		f.requestApproval(keyA, job)
	}
	u := f.signIn(keyApprover)
	if st, page, _ := u.get("/console/"); st != 200 || strings.Count(page, "/console/approvals/") != 11 {
		t.Fatalf("pending list: %d, %d jobs", st, strings.Count(page, "/console/approvals/"))
	}
	start := time.Now()
	for range 20 {
		u.get("/console/")
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("20 reloads of the pending list took %v", d)
	}
}

// A job asked for again after its decision (its one-use token spent, or
// denied) waits for a decision of its own: its agent is not handed the
// spent token again, approvers see it pending, and deciding it in the
// console gives a new token.
func TestApprovalAskedAgain(t *testing.T) {
	f := newFixture(t, consoleConfig)
	u := f.signIn(keyApprover)
	job := starlarkJob("result = 41 + 1")
	run := func(token string) reply {
		return f.do("POST", "/v1/run", keyA, job, server.ApprovalHeader, token)
	}
	d := f.requestApproval(keyA, job)
	u.decide(d, "approve", "once")
	status, first := f.decision(keyA, d)
	if status != "approved" || first == "" {
		t.Fatalf("the first decision: %s %q", status, first)
	}
	if r := run(first); r.status != 200 {
		t.Fatalf("the approved run: %d %s", r.status, r.body)
	}

	f.clock.add(time.Second)
	if again := f.requestApproval(keyA, job); again != d {
		t.Fatalf("the same job has another digest: %s, %s", again, d)
	}
	if status, token := f.decision(keyA, d); status != "pending" || token != "" {
		t.Errorf("asked again, the decision is %s with token %q, want pending", status, token)
	}
	if _, body, _ := u.get("/console/"); !strings.Contains(body, string(d)) {
		t.Errorf("asked again, the job is not on the approvers' list")
	}
	u.decide(d, "approve", "twice")
	status, second := f.decision(keyA, d)
	if status != "approved" || second == "" || second == first {
		t.Fatalf("the second decision: %s, a new token: %v", status, second != first)
	}
	if r := run(second); r.status != 200 {
		t.Errorf("the run approved again: %d %s", r.status, r.body)
	}

	// Denied, then asked again: pending, not denied.
	d = f.requestApproval(keyA, starlarkJob("result = 666"))
	u.decide(d, "deny", "no")
	f.clock.add(time.Second)
	f.requestApproval(keyA, starlarkJob("result = 666"))
	if status, _ := f.decision(keyA, d); status != "pending" {
		t.Errorf("denied, then asked again: %s, want pending", status)
	}
}
