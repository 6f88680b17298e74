package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/escalate"
	"github.com/airlock-sandbox/airlock/internal/jobs"
	"github.com/airlock-sandbox/airlock/internal/value"
)

// session is an open tier session bound to one tenant.
type session struct {
	id     string
	tenant *tenant
	tier   string
	ttl    time.Duration
	s      airlock.Session
	// account is the account whose executor keeps the session (account
	// tier only): its runs name it unless they name another, which the
	// tier refuses.
	account string

	mu      sync.Mutex
	last    time.Time
	running int // runs in progress: a session is idle only without any

	// ended is why the tier ended the session by itself (its sandbox was
	// lost), once a run saw it; the tenant's slot is then released
	// (guarded by the server's mu), while the entry stays until swept so
	// that later runs are told why.
	ended    string
	released bool
}

// endedBy is implemented by a tier's session that can end by itself (a
// gVisor session whose sandbox was lost): Ended says why, or "".
type endedBy interface{ Ended() string }

// noteEnded releases the tenant's slot of a session its tier ended by
// itself: it no longer counts toward max_sessions, and lists as ended.
func (s *Server) noteEnded(ss *session) {
	e, ok := ss.s.(endedBy)
	if !ok {
		return
	}
	why := e.Ended()
	if why == "" {
		return
	}
	s.mu.Lock()
	release := s.sessions[ss.id] == ss && !ss.released
	if release {
		ss.released, ss.ended = true, why
		ss.tenant.nsess--
	}
	s.mu.Unlock()
	if release {
		s.metrics.sessions.Add(-1)
		s.unregister(context.Background(), ss.id)
	}
}

func (ss *session) run(ctx context.Context, job airlock.Job) (airlock.Result, error) {
	ss.mu.Lock()
	ss.last = time.Now()
	ss.running++
	ss.mu.Unlock()
	job.Tier, job.Session, job.Lifecycle = "", "", ""
	res, err := ss.s.Run(ctx, job)
	ss.mu.Lock()
	ss.last = time.Now()
	ss.running--
	ss.mu.Unlock()
	return res, err
}

func (ss *session) idle(now time.Time) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.running == 0 && now.Sub(ss.last) > ss.ttl
}

// openRequest is the body of POST /v1/sessions.
type openRequest struct {
	// Tier names the tier; empty: the router picks one for Job.
	Tier string `json:"tier,omitempty"`
	// Job describes what will run in the session, for the router.
	Job json.RawMessage `json:"job,omitempty"`
	// TTL closes the session when idle this long (default and maximum:
	// the server's session_ttl).
	TTL Duration `json:"ttl,omitempty"`
}

type openResponse struct {
	ID       string   `json:"id"`
	Tier     string   `json:"tier"`
	TTL      Duration `json:"ttl"`
	Decision []string `json:"decision,omitempty"`
	// Warning says why a job of the tenant's default situation would be
	// refused in the session, when it would.
	Warning string `json:"warning,omitempty"`
}

// sessionInfo is an entry of GET /v1/sessions.
type sessionInfo struct {
	ID   string   `json:"id"`
	Tier string   `json:"tier"`
	TTL  Duration `json:"ttl"`
	Idle Duration `json:"idle"`
	// Running counts the session's runs in progress (one runs at a
	// time; the others wait their turn).
	Running int `json:"running,omitempty"`
	// Ended says why the tier ended the session by itself; its runs are
	// refused, and it no longer counts toward max_sessions.
	Ended string `json:"ended,omitempty"`
}

// handleListSessions lists the tenant's open sessions.
func (s *Server) handleListSessions(w http.ResponseWriter, r *http.Request) {
	t := s.tenant(w, r)
	if t == nil {
		return
	}
	now := time.Now()
	out := []sessionInfo{}
	s.mu.Lock()
	for _, ss := range s.sessions {
		if ss.tenant == t {
			ss.mu.Lock()
			idle := now.Sub(ss.last).Truncate(time.Second)
			running := ss.running
			ss.mu.Unlock()
			if running > 0 {
				idle = 0
			}
			out = append(out, sessionInfo{ID: ss.id, Tier: ss.tier, TTL: Duration(ss.ttl), Idle: Duration(idle), Running: running, Ended: ss.ended})
		}
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b sessionInfo) int { return strings.Compare(a.ID, b.ID) })
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) handleOpenSession(w http.ResponseWriter, r *http.Request) {
	t := s.tenant(w, r)
	if t == nil {
		return
	}
	defer s.gateBody(r, t)()
	var req openRequest
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, value.MaxJobBytes))
	if err != nil {
		s.refuseErr(w, readError(err, "body"))
		return
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	err = dec.Decode(&req)
	if err == nil && dec.Decode(new(json.RawMessage)) != io.EOF {
		err = errors.New("trailing data after the request object")
	}
	if err != nil {
		s.refuseErr(w, jobs.Invalid("", "session request: %s", err.Error()))
		return
	}
	var job *airlock.Job
	if len(req.Job) > 0 {
		j, err := airlock.DecodeJob(req.Job)
		if err != nil {
			s.refuseErr(w, err)
			return
		}
		job = &j
	}
	resp, err := s.openSession(r.Context(), t, req.Tier, job, time.Duration(req.TTL))
	if err != nil {
		s.answer(w, airlock.Result{}, err)
		return
	}
	writeJSON(w, http.StatusCreated, resp)
}

// sessionToOpen stands for the id of a session being opened in the job
// routed to open it.
const sessionToOpen = "s-new"

// openSession opens a session for t on the named tier, or on the tier the
// router picks for job; a ttl of zero is the server's maximum.
func (s *Server) openSession(ctx context.Context, t *tenant, tierName string, job *airlock.Job, ttl time.Duration) (openResponse, error) {
	var tier airlock.Tier
	var decision []string
	switch {
	case job != nil:
		if tierName != "" {
			job.Tier = tierName
		}
		// Routed as a job in a session, so that a rule's lifecycles
		// apply: the id is a stand-in until the session has its own.
		job.Session, job.Lifecycle = sessionToOpen, ""
		var err error
		if tier, err = t.route(s, job); err != nil {
			return openResponse{}, err
		}
		decision = s.router.Explain(job).Lines()
	case tierName != "":
		// Every run in the session is routed to this tier, so the policy
		// still decides per job whether the tier is strong enough.
		for _, tr := range s.router.Tiers() {
			if tr.Name() == tierName {
				tier = tr
			}
		}
		if tier == nil {
			return openResponse{}, jobs.Invalid("tier", "unknown tier %q", tierName)
		}
		if err := s.router.Unavailable(tierName); err != nil {
			return openResponse{}, &airlock.NotAdmitted{Tier: tierName, Reason: "unavailable: " + err.Error()}
		}
	default:
		return openResponse{}, jobs.Invalid("tier", "name a tier, or describe a job for the router to pick one")
	}
	if err := t.allowTier(tier.Name()); err != nil {
		return openResponse{}, err
	}
	st, ok := tier.(airlock.SessionTier)
	if !ok {
		return openResponse{}, &airlock.NotAdmitted{Tier: tier.Name(), Reason: "the tier keeps no sessions"}
	}
	acct := ""
	if _, ok := tier.(accountTier); ok {
		// The session is kept by one account's executor: the job's, which
		// route checked, or the tenant's default.
		if job != nil {
			acct = job.Account
		} else if len(t.Accounts) == 0 {
			return openResponse{}, t.noAccount()
		} else {
			acct = t.Accounts[0]
		}
	}
	maxTTL := s.cfg.SessionTTL.or(10 * time.Minute)
	if ttl < 0 {
		return openResponse{}, jobs.Invalid("ttl", "%s is negative (leave it out, or 0, for the server's maximum %s)", ttl, maxTTL)
	}
	if ttl == 0 {
		ttl = maxTTL
	}
	if ttl > maxTTL {
		return openResponse{}, jobs.Invalid("ttl", "%s is above the server's maximum %s", ttl, maxTTL)
	}
	// Opening starts a sandbox, as a run does: it spends one of the
	// tenant's runs per minute, so that opening and closing sessions in a
	// loop is held to the tenant's rate.
	if err := s.spend(ctx, t); err != nil {
		return openResponse{}, err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return openResponse{}, unavailable("the server is shutting down")
	}
	limit := s.cfg.MaxSessions
	if limit == 0 {
		limit = 16
	}
	if t.nsess >= limit {
		s.mu.Unlock()
		return openResponse{}, &overloaded{fmt.Sprintf("tenant %s has %d sessions open (the maximum); close one", t.Name, limit), 5}
	}
	t.nsess++
	s.mu.Unlock()
	id := newID()
	s.mu.Lock()
	s.opening[id] = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.opening, id)
		s.mu.Unlock()
	}()
	unopened := func() {
		s.mu.Lock()
		t.nsess--
		s.mu.Unlock()
	}
	// Registered first: the limit holds across the replicas sharing the
	// state, and no sandbox starts for a session that would be refused.
	ok, err := s.register(ctx, id, t, tier.Name(), limit)
	if err != nil {
		unopened()
		return openResponse{}, s.stateUnavailable("the session cannot be registered", err)
	}
	if !ok {
		unopened()
		return openResponse{}, &overloaded{fmt.Sprintf("tenant %s has %d sessions open across the replicas (the maximum); close one", t.Name, limit), 5}
	}
	sess, err := st.OpenSession(ctx, airlock.SessionOptions{ID: id, TTL: ttl, Account: acct})
	if err != nil {
		unopened()
		s.unregister(context.Background(), id)
		return openResponse{}, fmt.Errorf("opening session: %w", err)
	}
	ss := &session{id: id, tenant: t, tier: tier.Name(), ttl: ttl, s: sess, last: time.Now(), account: acct}
	s.mu.Lock()
	s.sessions[id] = ss
	s.mu.Unlock()
	s.metrics.sessions.Add(1)
	resp := openResponse{ID: id, Tier: tier.Name(), TTL: Duration(ttl), Decision: decision}
	if job == nil {
		resp.Warning = s.defaultRefusal(t, tier)
	}
	return resp, nil
}

// defaultRefusal says why a job of the kind the tier runs, in the tenant's
// default situation, would be refused on the tier, or "" when it would
// run: a session opened by tier name learns it when opened, not on every
// run.
func (s *Server) defaultRefusal(t *tenant, tier airlock.Tier) string {
	for _, probe := range []airlock.Job{
		{Kind: airlock.KindCommand, Argv: []string{"true"}},
		{Kind: airlock.KindStarlark, Code: "result = 1"},
		{Kind: airlock.KindExpr, Code: "1"},
	} {
		if tier.Admit(probe) != nil {
			continue // not the tier's kind
		}
		probe.Tier, probe.Session = tier.Name(), sessionToOpen
		if _, err := t.route(s, &probe); err != nil {
			return fmt.Sprintf("a %s job of situation %s (the tenant's default) would be refused in this session: %v", probe.Kind, t.defSit, err)
		}
		return ""
	}
	return ""
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "s-" + hex.EncodeToString(b[:])
}

// lookup returns the tenant's session; another tenant's session is as
// unknown as one that never existed.
func (s *Server) lookup(w http.ResponseWriter, r *http.Request) (*tenant, *session) {
	t := s.tenant(w, r)
	if t == nil {
		return nil, nil
	}
	ss := s.sessionOf(t, r.PathValue("id"))
	if ss == nil && s.elsewhere(w, r, t, r.PathValue("id")) {
		return nil, nil
	}
	if ss == nil {
		s.refuse(w, http.StatusNotFound, kindNotFound, "unknown session "+r.PathValue("id"))
		return nil, nil
	}
	return t, ss
}

// sessionOf returns t's session id, or nil: another tenant's session is as
// unknown as one that never existed.
func (s *Server) sessionOf(t *tenant, id string) *session {
	s.mu.Lock()
	ss := s.sessions[id]
	s.mu.Unlock()
	if ss == nil || ss.tenant != t {
		return nil
	}
	return ss
}

func (s *Server) handleSessionRun(w http.ResponseWriter, r *http.Request) {
	t, ss := s.lookup(w, r)
	if ss == nil {
		return
	}
	defer s.gateBody(r, t)()
	job, err := decodeJob(w, r)
	if err != nil {
		s.refuseErr(w, err)
		return
	}
	s.respond(w, r, &runRequest{t: t, job: job, token: r.Header.Get(ApprovalHeader), session: ss})
}

// sessionRun runs a job in rq's session, once the job agrees with it.
func (s *Server) sessionRun(ctx context.Context, rq *runRequest) (airlock.Result, error) {
	job, ss := &rq.job, rq.session
	if job.Session != "" && job.Session != ss.id {
		return airlock.Result{}, jobs.Invalid("session", "names %s, but the request is for %s", job.Session, ss.id)
	}
	if job.Tier != "" && job.Tier != escalate.TierAuto && job.Tier != ss.tier {
		return airlock.Result{}, jobs.Invalid("tier", "the session runs on %s, not %s", ss.tier, job.Tier)
	}
	// The session's id stays in the job so an approval's digest binds it:
	// a token issued for one session is stale in any other.
	job.Session, job.Lifecycle = ss.id, ""
	return s.execute(ctx, rq)
}

func (s *Server) handleCloseSession(w http.ResponseWriter, r *http.Request) {
	_, ss := s.lookup(w, r)
	if ss == nil {
		return
	}
	if err := s.closeSession(ss); err != nil {
		s.refuseErr(w, fmt.Errorf("closing session: %w", err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) closeSession(ss *session) error {
	s.mu.Lock()
	if s.sessions[ss.id] != ss {
		s.mu.Unlock()
		return nil
	}
	delete(s.sessions, ss.id)
	released := ss.released
	if !released {
		ss.tenant.nsess--
	}
	s.mu.Unlock()
	if !released {
		s.metrics.sessions.Add(-1)
		s.unregister(context.Background(), ss.id)
	}
	return ss.s.Close()
}

// janitor closes idle sessions and forgets expired pending approvals.
func (s *Server) janitor() {
	defer close(s.janDone)
	// Often enough for the session leases to be renewed well before
	// they lapse.
	every := min(max(time.Second, s.cfg.SessionTTL.or(10*time.Minute)/4), max(100*time.Millisecond, s.sessionLease()/3))
	tick := time.NewTicker(every)
	defer tick.Stop()
	var trim <-chan time.Time // run slots held idle go back promptly
	if s.store.Shared() {
		t := time.NewTicker(shareIdle)
		defer t.Stop()
		trim = t.C
	}
	for {
		select {
		case <-s.stopJan:
			return
		case now := <-trim:
			s.trimShares(now)
			continue
		case <-tick.C:
		}
		now := time.Now()
		s.sweep(now)
		s.renew()
	}
}

func (s *Server) sweep(now time.Time) {
	s.mu.Lock()
	var idle []*session
	for _, ss := range s.sessions {
		if ss.idle(now) {
			idle = append(idle, ss)
		}
	}
	for d, p := range s.pending {
		if now.Sub(p.created) > s.approvalTTL() {
			delete(s.pending, d)
		}
	}
	for d, created := range s.pendingSeen {
		if now.Sub(created) > s.approvalTTL() {
			delete(s.pendingSeen, d)
		}
	}
	s.mu.Unlock()
	for _, ss := range idle {
		_ = s.closeSession(ss)
	}
}
