package server

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/approve"
	"github.com/airlock-sandbox/airlock/internal/state"
)

// The approver's console: server-rendered pages under /console/ for the
// people who approve jobs. Job content is written by whoever the agent
// obeys, so every page treats it as hostile: it is escaped by
// approve.Display (hidden characters made visible) and then by
// html/template, and the CSP forbids inline script and style, so that an
// injection cannot run, restyle the page, or approve a job by itself.

//go:embed console
var consoleAssets embed.FS

// consoleTemplates are parsed on first use: every airlock command links
// this package, and only the console needs them.
var consoleTemplates = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("console").Funcs(template.FuncMap{
		"shortDigest": func(d approve.Digest) string {
			s := string(d)
			if i := strings.IndexByte(s, ':'); i >= 0 {
				s = s[i+1:]
			}
			return s[:min(len(s), 12)]
		},
		"when": func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") },
	}).ParseFS(consoleAssets, "console/*.html"))
})

const (
	consoleCookie    = "airlock_console"
	consolePreCookie = "airlock_console_pre" // the sign-in form's CSRF token
	consoleTTL       = 8 * time.Hour
	maxConsoleSess   = 1024
	maxDecided       = 1024
	keepDecided      = 24 * time.Hour // for the diff and the runs' records, past the token's expiry
	maxKeptRuns      = 256
	maxKeptOutput    = 16 << 10
	maxKeptFiles     = 16
	maxReason        = 1000
)

// consoleCSP allows the console's own files only: no inline script or
// style (a style attribute in job content is inert), no frames, forms
// posting only back to the console.
const consoleCSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// console is the console's state: sign-in sessions, the decisions made,
// the recent runs with their results, and the subscribers to changes.
type console struct {
	mu       sync.Mutex
	sessions map[string]*consoleSession
	decided  map[approve.Digest]*decision
	runs     []keptRun // the latest maxKeptRuns, oldest at runStart
	runStart int
	nextRun  int64
	change   chan struct{} // closed and replaced on every change
	ending   chan struct{} // closed when the server shuts down
	endOnce  sync.Once
}

type consoleSession struct {
	key      [32]byte // SHA-256 of the approver's key
	approver string
	csrf     string
	expires  time.Time
	streams  atomic.Int32 // its open event streams
}

// maxConsoleStreams bounds a console session's open event streams (a
// page open in a few tabs): each holds a connection for minutes.
const maxConsoleStreams = 8

// decision is an approver's answer to a pending job.
type decision struct {
	Digest   approve.Digest
	Tenant   string
	Approver string
	Reason   string
	Denied   bool
	Token    string
	Expires  time.Time
	At       time.Time
	job      airlock.Job // secret values redacted
	tier     string
	rule     string
}

// keptRun is an audit record the console saw, with the run's result
// (outputs truncated) when there was one.
type keptRun struct {
	ID  int64
	Seq uint64 // the record's seq in the audit file (0: none)
	Rec Record
	Res *airlock.Result
}

func newConsole() *console {
	return &console{sessions: map[string]*consoleSession{}, decided: map[approve.Digest]*decision{},
		change: make(chan struct{}), ending: make(chan struct{})}
}

// changed wakes every event stream.
func (c *console) changed() {
	if c == nil { // a Server built without New, in internal tests
		return
	}
	c.mu.Lock()
	close(c.change)
	c.change = make(chan struct{})
	c.mu.Unlock()
}

// endStreams ends every event stream, so that a graceful shutdown need
// not wait its grace for connections that never go idle.
func (c *console) endStreams() { c.endOnce.Do(func() { close(c.ending) }) }

func (c *console) changes() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.change
}

// ran keeps an audit record, its seq in the trail and the result it came
// from, for the runs page.
func (c *console) ran(rec Record, seq uint64, res *airlock.Result) {
	if c == nil {
		return
	}
	if res != nil {
		res = keptResult(res)
	}
	c.mu.Lock()
	c.nextRun++
	// A ring: this is on every run's path, so no copying of the rest.
	k := keptRun{ID: c.nextRun, Seq: seq, Rec: rec, Res: res}
	if len(c.runs) < maxKeptRuns {
		c.runs = append(c.runs, k)
	} else {
		c.runs[c.runStart] = k
		c.runStart = (c.runStart + 1) % maxKeptRuns
	}
	c.mu.Unlock()
	if rec.Approval != "" {
		c.changed() // a decided job's page lists its runs
	}
}

// keptRuns returns the kept runs, oldest first; c.mu must be held.
func (c *console) keptRuns() []keptRun {
	return append(slices.Clone(c.runs[c.runStart:]), c.runs[:c.runStart]...)
}

// decisionFor returns the decision that answers the request for d, or
// nil: a decision made before the job was last asked for answered an
// earlier request (its token may be spent), and the new one waits for a
// decision of its own.
func (s *Server) decisionFor(d approve.Digest) *decision {
	s.console.mu.Lock()
	dc := s.console.decided[d]
	s.console.mu.Unlock()
	if dc == nil {
		return nil
	}
	s.mu.Lock()
	p := s.pending[d]
	s.mu.Unlock()
	if p != nil && p.created.After(dc.At) {
		return nil
	}
	return dc
}

// decisionOf returns who approved digest d and why, for its runs' records.
func (c *console) decisionOf(d approve.Digest) (approver, reason string) {
	if c == nil {
		return "", ""
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if dc := c.decided[d]; dc != nil && !dc.Denied {
		return dc.Approver, dc.Reason
	}
	return "", ""
}

// keptResult is what the console keeps of a run's result: a few KiB of
// each output and of at most maxKeptFiles collected files, copied, so
// that the run's full outputs (MiBs each) are not kept alive with it.
func keptResult(res *airlock.Result) *airlock.Result {
	kept := *res
	kept.Stdout, kept.Stderr = truncate(kept.Stdout, maxKeptOutput), truncate(kept.Stderr, maxKeptOutput)
	if len(kept.Files) > 0 {
		kept.Files = make(map[string]string, min(len(res.Files), maxKeptFiles))
		for _, k := range slices.Sorted(maps.Keys(res.Files))[:min(len(res.Files), maxKeptFiles)] {
			kept.Files[strings.Clone(k)] = truncate(res.Files[k], maxKeptOutput)
		}
	}
	if n := valueSize(kept.Value); n > maxKeptOutput {
		kept.Value = fmt.Sprintf("[a value of about %d bytes, not kept]", n)
	}
	kept.FilesSkipped = nil // not shown
	if res.Error != nil {
		e := *res.Error
		e.Message = truncate(e.Message, maxKeptOutput)
		kept.Error = &e
	}
	if res.Stopped != nil {
		st := *res.Stopped
		st.Detail = truncate(st.Detail, maxKeptOutput)
		kept.Stopped = &st
	}
	return &kept
}

// truncate returns a copy of at most the first n bytes of s (a slice of
// s would keep all of it alive).
func truncate(s string, n int) string {
	if len(s) <= n {
		return strings.Clone(s)
	}
	return strings.Clone(s[:n])
}

// approverID names an approver in the trail without its key: the first
// hex digits of the key's SHA-256, which the operator's configuration
// lists in approver_sha256.
func approverID(sum [32]byte) string {
	return "approver:" + hex.EncodeToString(sum[:])[:16]
}

// approverTenants lists the tenants whose jobs the key with SHA-256 sum
// may approve.
func (s *Server) approverTenants(sum [32]byte) []*tenant {
	var out []*tenant
	for _, t := range s.tenants {
		for _, h := range t.ApproverSHA256 {
			b, _ := hex.DecodeString(h)
			if subtle.ConstantTimeCompare(sum[:], b) == 1 {
				out = append(out, t)
				break
			}
		}
	}
	return out
}

// decide records an approver's decision on a pending job: in the trail
// (who, why), and for the agent to fetch (the token, when approved).
// With once, a job already decided is left as it is (nil is returned),
// so that two approvers cannot both decide it, on any replica.
func (s *Server) decide(ctx context.Context, p *pending, d approve.Digest, approver, reason string, denied, once bool) (*decision, error) {
	now := s.now()
	dc := &decision{Digest: d, Tenant: p.tenant.Name, Approver: approver, Reason: reason, Denied: denied, At: now,
		job: p.job, tier: p.tier, rule: p.rule}
	if !denied {
		dc.Expires = now.Add(s.approvalTTL()).UTC().Truncate(time.Microsecond)
		dc.Token = s.signer.Issue(approve.Claims{Digest: d, Tenant: p.tenant.Name, Expires: dc.Expires})
	}
	c := s.console
	// A decision of an earlier request for the same job does not count:
	// this request is decided once, anew.
	decided := func() bool { old := c.decided[d]; return old != nil && !p.created.After(old.At) }
	c.mu.Lock()
	known := decided()
	c.mu.Unlock()
	if once && known {
		return nil, nil
	}
	if s.shared() {
		ctx, cancel := context.WithTimeout(ctx, stateStoreTimeout)
		ok, err := s.store.Decide(ctx, state.Decision{Digest: string(d), Tenant: dc.Tenant, Approver: approver, Reason: reason,
			Denied: denied, Expires: dc.Expires, At: now, Asked: p.created}, !once)
		cancel()
		if err != nil {
			return nil, s.stateUnavailable("the decision cannot be shared with the other replicas", err)
		}
		if !ok {
			s.syncDecided(ctx) // decided on another replica: show that one
			return nil, nil
		}
	}
	c.mu.Lock()
	if once && decided() {
		c.mu.Unlock()
		return nil, nil
	}
	c.keep(dc, now, s.approvalTTL())
	c.mu.Unlock()
	out := "approved"
	if denied {
		out = "denied"
	}
	rec := Record{Time: now.UTC(), Tenant: p.tenant.Name, Request: "approval", Digest: d, Approval: p.rule,
		Approver: approver, Reason: reason, Tier: p.tier, Image: p.job.Image, Grants: p.job.Grants, Limits: p.job.Limits, Outcome: out}
	if jobSize(&p.job) <= MaxAuditJob {
		// The job decided, for the trail and for the console's diff
		// against it once the decision is no longer kept in memory.
		job := p.job
		rec.Job = &job
	}
	seq, _ := s.audit.addSeq(rec)
	c.ran(rec, seq, nil)
	c.changed()
	return dc, nil
}

// keep adds a decision, forgetting old ones; c.mu is held.
func (c *console) keep(dc *decision, now time.Time, ttl time.Duration) {
	for k, o := range c.decided {
		if now.Sub(o.At) > max(keepDecided, 2*ttl) {
			delete(c.decided, k)
		}
	}
	if len(c.decided) >= maxDecided && c.decided[dc.Digest] == nil {
		var oldest *decision
		for _, o := range c.decided {
			if oldest == nil || o.At.Before(oldest.At) {
				oldest = o
			}
		}
		delete(c.decided, oldest.Digest)
	}
	c.decided[dc.Digest] = dc
}

// syncDecided adds the decisions made on other replicas to this one's:
// approved ones with their token, issued again from the shared key (the
// store keeps no token).
func (s *Server) syncDecided(ctx context.Context) {
	if !s.shared() {
		return
	}
	now := s.now()
	ctx, cancel := context.WithTimeout(ctx, stateStoreTimeout)
	defer cancel()
	rows, err := s.store.Decisions(ctx, now.Add(-max(keepDecided, 2*s.approvalTTL())))
	if err != nil {
		fmt.Fprintf(s.audit.log, "airlock: listing shared decisions: %v\n", err)
		return
	}
	changed := false
	for _, row := range rows {
		d := approve.Digest(row.Digest)
		s.console.mu.Lock()
		old := s.console.decided[d]
		s.console.mu.Unlock()
		if old != nil && !row.At.After(old.At) {
			continue
		}
		dc := &decision{Digest: d, Tenant: row.Tenant, Approver: row.Approver, Reason: row.Reason, Denied: row.Denied, At: row.At}
		if !row.Denied {
			dc.Expires = row.Expires.UTC()
			dc.Token = s.signer.Issue(approve.Claims{Digest: d, Tenant: row.Tenant, Expires: dc.Expires})
		}
		s.mu.Lock()
		if p := s.pending[d]; p != nil {
			dc.job, dc.tier, dc.rule = p.job, p.tier, p.rule
		}
		s.mu.Unlock()
		s.console.mu.Lock()
		s.console.keep(dc, now, s.approvalTTL())
		s.console.mu.Unlock()
		changed = true
	}
	if changed {
		s.console.changed()
	}
}

// handleDecision tells the tenant (or an approver) what became of a
// job it asked approval for: pending, denied with the reason, or
// approved with the token to run it with.
func (s *Server) handleDecision(w http.ResponseWriter, r *http.Request) {
	d := approve.Digest(r.PathValue("digest"))
	key, _ := bearer(r)
	i, isTenant := s.keys.find(key)
	if !isTenant && !s.isApprover(r) {
		// Word for word what a digest nobody asked for gets, without
		// asking the shared state.
		s.refuse(w, http.StatusNotFound, kindNotFound, "no pending approval "+string(d))
		return
	}
	s.syncPending(r.Context())
	dc := s.decisionFor(d)
	type answer struct {
		Digest   approve.Digest `json:"digest"`
		Status   string         `json:"status"` // pending, approved, denied
		Approver string         `json:"approver,omitempty"`
		Reason   string         `json:"reason,omitempty"`
		Token    string         `json:"token,omitempty"`
		Expires  *time.Time     `json:"expires,omitempty"`
	}
	if dc != nil {
		var t *tenant
		for _, tn := range s.tenants {
			if tn.Name == dc.Tenant {
				t = tn
			}
		}
		if t == nil || !(isTenant && s.tenants[i] == t) && !approver(r, t) {
			// Word for word what a digest nobody asked for gets: anyone
			// else learns nothing, not even that a guessed job was decided.
			s.refuse(w, http.StatusNotFound, kindNotFound, "no pending approval "+string(d))
			return
		}
		a := answer{Digest: d, Status: "approved", Approver: dc.Approver, Reason: dc.Reason, Token: dc.Token}
		if dc.Denied {
			a.Status = "denied"
		} else {
			a.Expires = &dc.Expires
		}
		writeJSON(w, http.StatusOK, a)
		return
	}
	p, _, ok := s.pendingFor(w, r)
	if !ok {
		return
	}
	if !(isTenant && s.tenants[i] == p.tenant) && !approver(r, p.tenant) {
		s.refuse(w, http.StatusNotFound, kindNotFound, "no pending approval "+string(d))
		return
	}
	writeJSON(w, http.StatusOK, answer{Digest: d, Status: "pending"})
}

func (s *Server) consoleRoutes(m *http.ServeMux) {
	m.HandleFunc("GET /v1/approvals/{digest}/decision", s.handleDecision)
	static, _ := fs.Sub(consoleAssets, "console/static")
	files := http.StripPrefix("/console/static/", http.FileServerFS(static))
	m.Handle("GET /console/static/{file}", consoleHeaders(files))
	m.Handle("GET /console/{$}", s.signedIn(s.consolePending))
	m.Handle("POST /console/signin", consoleHeaders(http.HandlerFunc(s.consoleSignIn)))
	m.Handle("POST /console/signout", s.signedIn(s.consoleSignOut))
	m.Handle("GET /console/events", s.signedIn(s.consoleEvents))
	m.Handle("GET /console/approvals/{digest}", s.signedIn(s.consoleDetail))
	m.Handle("POST /console/approvals/{digest}", s.signedIn(s.consoleDecide))
	m.Handle("GET /console/audit", s.signedIn(s.consoleAudit))
	m.Handle("GET /console/runs/{id}", s.signedIn(s.consoleRun))
	m.Handle("GET /console/runs/{id}/record", s.signedIn(s.consoleRecord))
	m.Handle("GET /console/records/{seq}", s.signedIn(s.consoleTrailRecord))
	m.Handle("GET /console/records/{seq}/line", s.signedIn(s.consoleTrailLine))
	m.Handle("/console/", consoleHeaders(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if allow := allowed(m, r); len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			consoleError(w, http.StatusMethodNotAllowed, "This page does not take "+r.Method+".")
			return
		}
		consoleError(w, http.StatusNotFound, "No such page.")
	})))
}

// consoleHeaders sets the headers every console response carries.
func consoleHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", consoleCSP)
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "no-referrer")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("Cache-Control", "no-store")
		// The console's forms are a few fields; the form parser would
		// otherwise read up to 10 MB, and the sign-in form is read before
		// anyone is known.
		r.Body = http.MaxBytesReader(w, r.Body, consoleFormMax)
		h.ServeHTTP(w, r)
	})
}

// consoleFormMax bounds a console request's body.
const consoleFormMax = 64 << 10

// errCrossSite is a state-changing request that did not come from the
// console's own pages.
var errCrossSite = errors.New("cross-site request refused")

// sameOrigin checks a POST came from a console page: its Origin (or,
// without one, its Fetch metadata) must be the console's own.
func sameOrigin(r *http.Request) error {
	site := r.Header.Get("Sec-Fetch-Site")
	if o := r.Header.Get("Origin"); o == "null" {
		// Browsers send "null" from a page with Referrer-Policy:
		// no-referrer, as the console's are, and from opaque origins
		// (sandboxed frames, data: URLs): only Fetch metadata tells them
		// apart.
		if site != "same-origin" {
			return errCrossSite
		}
		return nil
	} else if o != "" {
		// The host (with its port) decides, not the scheme: behind a
		// proxy that ends TLS the page is https and the request http.
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host {
			return errCrossSite
		}
		return nil
	}
	if site != "" && site != "same-origin" && site != "none" {
		return errCrossSite
	}
	return nil
}

// secure reports whether the browser reached the console over TLS: here,
// or at a proxy that says so. (Believing a client that claims it only
// makes its own cookie unusable over plain HTTP.)
func secure(r *http.Request) bool {
	return r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https"
}

func randomToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// session returns the caller's console session, if it has a live one.
func (s *Server) session(r *http.Request) (string, *consoleSession) {
	ck, err := r.Cookie(consoleCookie)
	if err != nil {
		return "", nil
	}
	c := s.console
	c.mu.Lock()
	defer c.mu.Unlock()
	cs := c.sessions[ck.Value]
	if cs == nil {
		return "", nil
	}
	if !s.now().Before(cs.expires) {
		delete(c.sessions, ck.Value)
		return "", nil
	}
	return ck.Value, cs
}

// viewer is who is looking at a console page.
type viewer struct {
	id       string
	sess     *consoleSession
	tenants  []*tenant
	Approver string
	CSRF     string
}

func (v *viewer) may(t *tenant) bool { return slices.Contains(v.tenants, t) }

func (v *viewer) mayName(name string) bool {
	return slices.ContainsFunc(v.tenants, func(t *tenant) bool { return t.Name == name })
}

// signedIn serves h to a signed-in approver, the sign-in page to anyone
// else; a POST must also carry the session's CSRF token and come from
// the console's origin.
func (s *Server) signedIn(h func(http.ResponseWriter, *http.Request, *viewer)) http.Handler {
	return consoleHeaders(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, cs := s.session(r)
		var v *viewer
		if cs != nil {
			v = &viewer{id: id, sess: cs, tenants: s.approverTenants(cs.key), Approver: cs.approver, CSRF: cs.csrf}
			if len(v.tenants) == 0 {
				v = nil // the key approves for nobody any more
			}
		}
		if r.Method == http.MethodPost {
			if err := sameOrigin(r); err != nil {
				consoleError(w, http.StatusForbidden, "Refused: the request did not come from this console.")
				return
			}
			if v == nil {
				consoleError(w, http.StatusForbidden, "Refused: sign in first.")
				return
			}
			if subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(v.CSRF)) != 1 {
				consoleError(w, http.StatusForbidden, "Refused: the form's token is missing or stale; reload the page.")
				return
			}
		}
		if v == nil {
			if r.URL.Path == "/console/events" {
				http.Error(w, "sign in", http.StatusUnauthorized)
				return
			}
			s.consoleSignInPage(w, r, "")
			return
		}
		h(w, r, v)
	}))
}

func consoleError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_ = consoleTemplates().ExecuteTemplate(w, "error.html", map[string]any{"Title": http.StatusText(status), "Message": msg})
}

func render(w http.ResponseWriter, name string, data any) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := consoleTemplates().ExecuteTemplate(w, name, data); err != nil {
		// Headers are sent; all that is left is to end the page visibly.
		_, _ = w.Write([]byte("\n<p>error rendering the page</p>"))
	}
}

func (s *Server) consoleSignInPage(w http.ResponseWriter, r *http.Request, problem string) {
	pre := randomToken()
	http.SetCookie(w, &http.Cookie{Name: consolePreCookie, Value: pre, Path: "/console/", HttpOnly: true,
		Secure: secure(r), SameSite: http.SameSiteStrictMode, MaxAge: 3600})
	if problem != "" {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(http.StatusForbidden)
	}
	render(w, "signin.html", map[string]any{"Title": "Sign in", "CSRF": pre, "Problem": problem})
}

func (s *Server) consoleSignIn(w http.ResponseWriter, r *http.Request) {
	pre, err := r.Cookie(consolePreCookie)
	if sameOrigin(r) != nil || err != nil || subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(pre.Value)) != 1 {
		consoleError(w, http.StatusForbidden, "Refused: the request did not come from this console's sign-in form.")
		return
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(r.PostFormValue("key"))))
	if len(s.approverTenants(sum)) == 0 {
		s.consoleSignInPage(w, r, "That key approves for no tenant.")
		return
	}
	id := randomToken()
	now := s.now()
	c := s.console
	c.mu.Lock()
	for k, cs := range c.sessions {
		if !now.Before(cs.expires) {
			delete(c.sessions, k)
		}
	}
	if len(c.sessions) >= maxConsoleSess {
		c.mu.Unlock()
		consoleError(w, http.StatusServiceUnavailable, "Too many console sessions; try again later.")
		return
	}
	c.sessions[id] = &consoleSession{key: sum, approver: approverID(sum), csrf: randomToken(), expires: now.Add(consoleTTL)}
	c.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: consoleCookie, Value: id, Path: "/console/", HttpOnly: true,
		Secure: secure(r), SameSite: http.SameSiteStrictMode, MaxAge: int(consoleTTL / time.Second)})
	http.SetCookie(w, &http.Cookie{Name: consolePreCookie, Value: "", Path: "/console/", MaxAge: -1})
	http.Redirect(w, r, "/console/", http.StatusSeeOther)
}

func (s *Server) consoleSignOut(w http.ResponseWriter, r *http.Request, v *viewer) {
	s.console.mu.Lock()
	delete(s.console.sessions, v.id)
	s.console.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: consoleCookie, Value: "", Path: "/console/", MaxAge: -1, HttpOnly: true,
		Secure: secure(r), SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/console/", http.StatusSeeOther)
}

// consoleEvents streams a "pending" event whenever approvals or
// decisions change; the page's script then fetches the list again.
func (s *Server) consoleEvents(w http.ResponseWriter, r *http.Request, v *viewer) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	if v.sess.streams.Add(1) > maxConsoleStreams {
		v.sess.streams.Add(-1)
		w.Header().Set("Retry-After", "30")
		http.Error(w, "too many open event streams for this session", http.StatusTooManyRequests)
		return
	}
	defer v.sess.streams.Add(-1)
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte("retry: 2000\n\n"))
	fl.Flush()
	beat := time.NewTicker(25 * time.Second) // keeps proxies from closing an idle stream
	defer beat.Stop()
	// A stream ends now and then (the browser reconnects), so that a
	// session that expired or signed out stops receiving.
	end := time.NewTimer(5 * time.Minute)
	defer end.Stop()
	last := s.listPrint(v)
	for {
		ch := s.console.changes()
		select {
		case <-r.Context().Done():
			return
		case <-end.C:
			return
		case <-s.console.ending:
			return
		case <-beat.C:
			_, _ = w.Write([]byte(": keep-alive\n\n"))
		case <-ch:
			if _, cs := s.session(r); cs == nil {
				return
			}
			// Say so only when this approver's list changed: another
			// tenant's activity is not theirs to see, not even its timing.
			now := s.listPrint(v)
			if now == last {
				continue
			}
			last = now
			_, _ = w.Write([]byte("event: pending\ndata: changed\n\n"))
		}
		fl.Flush()
	}
}

// listPrint identifies what the viewer's pending list shows.
func (s *Server) listPrint(v *viewer) string {
	var b strings.Builder
	for _, e := range s.pendingOf(v) {
		b.WriteString(string(e.d))
		b.WriteByte(' ')
	}
	return b.String()
}

// parseID reads a run's id from the path.
func parseID(r *http.Request) int64 {
	n, _ := strconv.ParseInt(r.PathValue("id"), 10, 64)
	return n
}
