package server

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/approve"
	"github.com/airlock-sandbox/airlock/escalate"
	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/internal/jobs"
	"github.com/airlock-sandbox/airlock/internal/monotime"
	"github.com/airlock-sandbox/airlock/internal/value"
	"github.com/google/go-containerregistry/pkg/name"
)

// ApprovalHeader carries an approval token on a run request.
const ApprovalHeader = "Airlock-Approval"

// The kinds of refusals that are not a Result's error kinds.
const (
	kindUnauthorized = "unauthorized"
	kindForbidden    = "forbidden"
	kindOverloaded   = "overloaded"
	kindNotFound     = "not_found"
	kindMethod       = "method_not_allowed"
	kindAudit        = "audit_unavailable"
)

func (s *Server) routes() {
	m := http.NewServeMux()
	m.HandleFunc("POST /v1/run", s.handleRun)
	m.HandleFunc("POST /v1/explain", s.handleExplain)
	m.HandleFunc("GET /v1/tiers", s.handleTiers)
	m.HandleFunc("GET /v1/images", s.handleImages)
	m.HandleFunc("GET /v1/sessions", s.handleListSessions)
	m.HandleFunc("POST /v1/sessions", s.handleOpenSession)
	m.HandleFunc("POST /v1/sessions/{id}/run", s.handleSessionRun)
	m.HandleFunc("DELETE /v1/sessions/{id}", s.handleCloseSession)
	m.HandleFunc("GET /v1/approvals", s.handleListApprovals)
	m.HandleFunc("POST /v1/approvals", s.handleRequestApproval)
	m.HandleFunc("GET /v1/approvals/{digest}", s.handleShowApproval)
	m.HandleFunc("POST /v1/approvals/{digest}/approve", s.handleApprove)
	m.HandleFunc("GET /v1/audit", s.handleAudit)
	m.HandleFunc("GET /healthz", s.handleHealth)
	m.HandleFunc("GET /readyz", s.handleReady)
	m.HandleFunc("GET /metrics", s.handleMetrics)
	// The MCP endpoints take what streamable HTTP uses; another method
	// gets the API's 405 below.
	mcpHandler := s.mcpHandler() // the body deadline is s.handler's
	for _, method := range []string{http.MethodGet, http.MethodPost, http.MethodDelete} {
		m.Handle(method+" /mcp", mcpHandler)
		m.HandleFunc(method+" /mcp/wrapped/{name}", s.handleWrapped)
	}
	s.consoleRoutes(m)
	// Without a catch-all the mux would answer a wrong method and an
	// unknown path in plain text; these answer in the API's error shape.
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if allow := allowed(m, r); len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			s.refuse(w, http.StatusMethodNotAllowed, kindMethod, r.Method+" "+r.URL.Path+" is not allowed (allowed: "+strings.Join(allow, ", ")+")")
			return
		}
		s.refuse(w, http.StatusNotFound, kindNotFound, "no such endpoint: "+r.Method+" "+r.URL.Path+" (see docs/server.md)")
	})
	s.mux = m
	s.handler = withWriteDeadline(withBodyDeadline(s.withReplica(m)))
}

// catchAll are the patterns that answer paths no route takes.
var catchAll = map[string]bool{"/": true, "/console/": true}

// allowed lists the methods with a route of their own for r's path.
func allowed(mux *http.ServeMux, r *http.Request) []string {
	var out []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodDelete} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := mux.Handler(probe); pattern != "" && !catchAll[pattern] {
			out = append(out, m)
		}
	}
	return out
}

// apiError is the body of a refusal: the shape of a Result's error.
type apiError struct {
	Error airlock.ErrorInfo `json:"error"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	extendWrite(w)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

func (s *Server) refuse(w http.ResponseWriter, status int, kind, msg string) {
	counter(&s.metrics.refusals, strconv.Itoa(status)).Add(1)
	writeJSON(w, status, apiError{airlock.ErrorInfo{Kind: airlock.ErrorKind(kind), Message: clipMessage(msg)}})
}

// refuseErr answers an airlock error with the status its kind implies.
func (s *Server) refuseErr(w http.ResponseWriter, err error) {
	if ov := (*overloaded)(nil); errors.As(err, &ov) {
		s.answer(w, airlock.Result{}, ov)
		return
	}
	if stop, ok := airlock.AsStop(err); ok && stop.Reason == airlock.StopDenied {
		// A capability the tenant may not grant (a host path outside its
		// roots): refused before any tier, as the denied stop it is.
		counter(&s.metrics.refusals, strconv.Itoa(http.StatusForbidden)).Add(1)
		stop.Detail = clipMessage(stop.Detail)
		writeResult(w, http.StatusForbidden, &airlock.Result{Stopped: &stop})
		return
	}
	kind := airlock.KindOf(err)
	s.refuse(w, statusOf(kind), string(kind), s.publicMessage(err))
}

// publicMessage is what a client is told of err: the error itself, unless
// airlock failed (kind internal), whose cause (a host path, a database
// error, a tier's internals) goes to the server's log, the client being
// told what failed and where to look.
func (s *Server) publicMessage(err error) string {
	if airlock.KindOf(err) != airlock.ErrInternal {
		return err.Error()
	}
	fmt.Fprintf(s.audit.log, "airlock: %s\n", clipMessage(err.Error()))
	what, _, _ := strings.Cut(err.Error(), ": ")
	if strings.ContainsAny(what, "/\\") || len(what) > 80 {
		what = "the request"
	}
	return what + ": airlock failed (the server's log says why)"
}

func statusOf(k airlock.ErrorKind) int {
	switch k {
	case airlock.ErrInvalid:
		return http.StatusBadRequest
	case airlock.ErrNotAdmitted:
		return http.StatusForbidden
	case airlock.ErrInternal:
		return http.StatusInternalServerError
	}
	return http.StatusOK // compile and runtime errors are the code's, not the request's
}

// tenant authenticates a request by its bearer key.
func (s *Server) tenant(w http.ResponseWriter, r *http.Request) *tenant {
	key, ok := bearer(r)
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="airlock"`)
		w.Header().Set("Connection", "close") // not waiting for a body nobody will read
		s.refuse(w, http.StatusUnauthorized, kindUnauthorized, "missing API key (Authorization: Bearer KEY)")
		return nil
	}
	i, ok := s.keys.find(key)
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="airlock", error="invalid_token"`)
		w.Header().Set("Connection", "close")
		s.refuse(w, http.StatusUnauthorized, kindUnauthorized, "unknown API key")
		return nil
	}
	return s.tenants[i]
}

// bearer returns the request's bearer key. The scheme is matched without
// regard to case (RFC 7235), as the MCP SDK's check does, so that every
// endpoint (and each of the /mcp handler's own limits) knows the same
// caller.
func bearer(r *http.Request) (string, bool) {
	scheme, key, ok := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	key = strings.TrimSpace(key)
	return key, ok && strings.EqualFold(scheme, "Bearer") && key != ""
}

// bodies are the buffers request bodies are read into.
var bodies = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledBody bounds the body buffers kept for reuse.
const maxPooledBody = 64 << 10

// decodeJob reads a job body strictly: the common shape without
// reflection (quickJob), anything else with airlock.DecodeJob.
func decodeJob(w http.ResponseWriter, r *http.Request) (airlock.Job, error) {
	buf := bodies.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= maxPooledBody {
			bodies.Put(buf)
		}
	}()
	buf.Reset()
	// One byte more than a job may have, so DecodeJob reports the size.
	_, err := buf.ReadFrom(io.LimitReader(http.MaxBytesReader(w, r.Body, value.MaxJobBytes+1), value.MaxJobBytes+1))
	if err != nil {
		return airlock.Job{}, readError(err, "the job")
	}
	if job, ok := quickJob(buf.Bytes()); ok {
		return job, nil
	}
	return airlock.DecodeJob(buf.Bytes())
}

// allowPull refuses an image reference the store would pull from a
// registry the operator did not list: the server's network position is
// not the tenant's to aim. Names, digests and the host view pull nothing;
// the default image and the tenant's own list are the operator's choice.
func (t *tenant) allowPull(ref string) error {
	if !strings.ContainsAny(ref, "/:@") || storeDigest(ref) || ref == t.defImage || slices.Contains(t.Images, ref) {
		return nil
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		return nil // Validate's concern; the store refuses it without a request
	}
	if reg := r.Context().RegistryStr(); !slices.Contains(t.pullFrom, reg) {
		return &airlock.NotAdmitted{Reason: fmt.Sprintf("tenant %s may not pull image %s: registry %s is not in images.registries", t.Name, ref, reg)}
	}
	return nil
}

// storeDigest reports whether ref is a digest alone ("sha256:" and 64
// lower-case hex digits), which the store looks up and never pulls. Only
// that form: "sha256:443/team/tool@sha256:…" is a reference to a registry
// at the host "sha256".
func storeDigest(ref string) bool {
	h, ok := strings.CutPrefix(ref, "sha256:")
	return ok && len(h) == 64 && strings.Trim(h, "0123456789abcdef") == ""
}

// admit applies the tenant's rules to a job: situations, tiers, and limits
// resolved against the tenant's policy (a limit above its maximum is an
// invalid job naming the field).
func (t *tenant) admit(job *airlock.Job) error {
	if n := grantsSize(&job.Grants); n > maxGrants {
		return jobs.Invalid("grants", "about %d bytes, over the server's limit of %d", n, maxGrants)
	}
	if err := job.Validate(); err != nil {
		return err
	}
	if n := len(job.Grants.FS.Read); n > maxReadGrants {
		// Each is resolved, and a file's content hashed for the digest
		// (up to a MiB), on every run and approval request.
		return jobs.Invalid("grants.fs.read", "%d host paths; at most %d", n, maxReadGrants)
	}
	if job.Situation == "" {
		job.Situation = t.defSit
	}
	if !slices.Contains(t.allowed, job.Situation) {
		return &airlock.NotAdmitted{Reason: fmt.Sprintf("tenant %s may not run jobs in situation %s (allowed: %v)", t.Name, job.Situation, t.allowed)}
	}
	if job.Tier != "" && job.Tier != escalate.TierAuto {
		if !slices.Contains(t.tierNames, job.Tier) {
			// A typo is the client's mistake, not the tenant's limit.
			return jobs.Invalid("tier", "unknown tier %q (GET /v1/tiers lists them)", job.Tier)
		}
		if err := t.allowTier(job.Tier); err != nil {
			return err
		}
	}
	if job.Account != "" {
		if err := t.allowAccount(job.Account); err != nil {
			return err
		}
	}
	if job.Kind == airlock.KindCommand {
		// Named in the job, so that its approval, display and record name
		// the image whatever the default is later; the approval also binds
		// the digest the name points at (imagePin).
		if job.Image == "" {
			job.Image = t.defImage
		}
		ref := cmp.Or(job.Image, image.Host)
		if len(t.Images) > 0 && !slices.Contains(t.Images, ref) {
			return &airlock.NotAdmitted{Reason: fmt.Sprintf("tenant %s may not use image %s (allowed: %s)", t.Name, ref, strings.Join(t.Images, ", "))}
		}
		if err := t.allowPull(ref); err != nil {
			return err
		}
	}
	var err error
	if job.Limits, err = t.limits.Resolve(job.Limits); err != nil {
		return err
	}
	// What is bound and approved is the real path each grant names.
	return t.roots.ResolveFS(&job.Grants.FS)
}

// route admits a job for the tenant and routes it to a tier it may use.
func (t *tenant) route(s *Server, job *airlock.Job) (airlock.Tier, error) {
	if err := t.admit(job); err != nil {
		return nil, err
	}
	tier, err := s.router.Route(job)
	if err != nil {
		return nil, err
	}
	if err := t.onTier(tier, job); err != nil {
		return nil, err
	}
	return tier, nil
}

// onTier applies the tenant's rules for the tier the router chose: the
// tenant's allowed tiers, and on the account tier its default account.
// Explanations call it too, so that they refuse what a run refuses.
func (t *tenant) onTier(tier airlock.Tier, job *airlock.Job) error {
	if err := t.allowTier(tier.Name()); err != nil {
		return err
	}
	if _, ok := tier.(accountTier); ok && job.Account == "" {
		// The job runs under the tenant's default account, named in the
		// job so that its approval binds it too.
		if len(t.Accounts) == 0 {
			return t.noAccount()
		}
		job.Account = t.Accounts[0]
	}
	return nil
}

// chosen is the router's tier named name (an explanation's choice).
func (s *Server) chosen(name string) airlock.Tier {
	for _, tr := range s.router.Tiers() {
		if tr.Name() == name {
			return tr
		}
	}
	return nil
}

// accountTier is the account tier (tiers/account), which runs a job under
// the account it names.
type accountTier interface{ Accounts() []string }

func (t *tenant) allowAccount(name string) error {
	if len(t.Accounts) == 0 {
		return t.noAccount()
	}
	if !slices.Contains(t.Accounts, name) {
		return &airlock.NotAdmitted{Reason: fmt.Sprintf("tenant %s may not use account %s (allowed: %s)", t.Name, name, strings.Join(t.Accounts, ", "))}
	}
	return nil
}

func (t *tenant) noAccount() error {
	return &airlock.NotAdmitted{Reason: fmt.Sprintf("tenant %s may use no account (the operator lists them in the tenant's accounts)", t.Name)}
}

func (t *tenant) allowTier(name string) error {
	if len(t.Tiers) > 0 && !slices.Contains(t.Tiers, name) {
		return &airlock.NotAdmitted{Tier: name, Reason: fmt.Sprintf("tenant %s may not use tier %s (allowed: %v)", t.Name, name, t.Tiers)}
	}
	return nil
}

// overloaded is a refusal for lack of capacity; RetryAfter is in seconds.
type overloaded struct {
	msg        string
	retryAfter int
}

func (e *overloaded) Error() string { return e.msg }

// spend takes one run of the tenant's runs per minute. Every run request
// that gets as far as the tenant's rules spends one, refused or not: a
// refused run is an audit record too.
func (s *Server) spend(ctx context.Context, t *tenant) error {
	if t.rate != nil && !t.rate.Allow() {
		return &overloaded{fmt.Sprintf("tenant %s is over its %d runs per minute", t.Name, t.RunsPerMinute), max(1, 60/t.RunsPerMinute)}
	}
	if t.lease != nil {
		ok, err := t.lease.take(ctx)
		if err != nil {
			return s.stateUnavailable("the run quota cannot be checked", err)
		}
		if !ok {
			return &overloaded{fmt.Sprintf("tenant %s is over its %d runs per minute", t.Name, t.RunsPerMinute), max(1, 60/t.RunsPerMinute)}
		}
	}
	return nil
}

// acquire takes a run slot of the tenant: at once if one is free, else
// waiting in a bounded queue for at most the configured wait. On a shared
// state the slot is one of the tenant's slots across the replicas too.
func (s *Server) acquire(ctx context.Context, t *tenant) (func(), error) {
	deadline := time.NewTimer(s.cfg.QueueWait.or(time.Second))
	defer deadline.Stop()
	release, err := s.localSlot(ctx, t, deadline.C)
	if err != nil || t.share == nil {
		return release, err
	}
	ok, err := t.share.take(ctx)
	if !ok && err == nil {
		// Every slot is held by runs here or on other replicas: ask again
		// while the run may wait.
		t.waiting.Add(1)
		defer t.waiting.Add(-1)
		poll := time.NewTimer(10 * time.Millisecond)
		defer poll.Stop()
		for wait := 10 * time.Millisecond; !ok && err == nil; {
			select {
			case <-poll.C:
			case <-deadline.C:
				release()
				return nil, &overloaded{fmt.Sprintf("tenant %s has %d runs in flight across the replicas; no slot freed in time", t.Name, t.share.limit), 1}
			case <-ctx.Done():
				release()
				return nil, &overloaded{"request cancelled while queued", 1}
			}
			ok, err = t.share.take(ctx)
			wait = min(2*wait, 200*time.Millisecond)
			poll.Reset(wait)
		}
	}
	if err != nil {
		release()
		return nil, s.stateUnavailable("the tenant's runs in flight cannot be counted", err)
	}
	return func() { t.share.put(); release() }, nil
}

// localSlot takes one of the tenant's slots on this replica, waiting
// until expired fires.
func (s *Server) localSlot(ctx context.Context, t *tenant, expired <-chan time.Time) (func(), error) {
	release := func() { <-t.slots }
	select {
	case t.slots <- struct{}{}:
		return release, nil
	default:
	}
	if t.waiting.Add(1) > int64(4*cap(t.slots)) {
		t.waiting.Add(-1)
		return nil, &overloaded{fmt.Sprintf("tenant %s has %d runs in flight and a full queue", t.Name, cap(t.slots)), 1}
	}
	defer t.waiting.Add(-1)
	select {
	case t.slots <- struct{}{}:
		return release, nil
	case <-expired:
		return nil, &overloaded{fmt.Sprintf("tenant %s has %d runs in flight; no slot freed in time", t.Name, cap(t.slots)), 1}
	case <-ctx.Done():
		return nil, &overloaded{"request cancelled while queued", 1}
	}
}

// runRequest is one run through the API, from an authenticated tenant.
type runRequest struct {
	t       *tenant
	job     airlock.Job
	token   string
	session *session
	// started, if set, is called once nothing can refuse the job any more,
	// just before a tier runs it (a streamed answer commits its status
	// then).
	started func()
}

// execute admits, queues, routes, checks approvals, runs and records a
// job. It returns the result and the error the run ended with; an error
// with an empty result tier means the job never reached a tier.
func (s *Server) execute(ctx context.Context, rq *runRequest) (airlock.Result, error) {
	res, err := s.run(ctx, rq)
	if res.Tier == "" && err != nil {
		ov, au, ru := (*overloaded)(nil), (*auditUnavailable)(nil), (*replicaUnavailable)(nil)
		if !errors.As(err, &ov) && !errors.As(err, &ru) && !(errors.As(err, &au) && au.ran) {
			// A refusal for a failing trail is recorded too: that write
			// is what tells when the trail can be written again.
			s.recordRefusal(rq, err)
		}
	}
	return res, err
}

// auditUnavailable refuses a run because the audit trail cannot be
// written: before it runs while the last write failed, or after it ran
// when its own record could not be written (ran), so that no run is
// answered without its record.
type auditUnavailable struct {
	err error
	ran bool
}

func (e *auditUnavailable) Error() string {
	cause := e.err
	// The tenant is told why, not where the server keeps its trail.
	if pe := (*os.PathError)(nil); errors.As(cause, &pe) {
		cause = pe.Err
	}
	return "the audit trail cannot be written (" + cause.Error() + "); runs are refused until a record can be written"
}

func (e *auditUnavailable) Unwrap() error { return e.err }

// auditGate refuses runs while the trail cannot be written, unless the
// operator chose to fail open.
func (s *Server) auditGate() error {
	if s.cfg.AuditFailOpen {
		return nil
	}
	if err := s.audit.failed(); err != nil {
		return &auditUnavailable{err: err}
	}
	return nil
}

// recordRefusal audits a job refused before it reached a tier (a stale
// approval, a tier or situation the tenant may not use, ...), so that
// attempts show in the trail too. Overload refusals are only counted.
func (s *Server) recordRefusal(rq *runRequest, err error) {
	outcome := "refused_" + string(airlock.KindOf(err))
	if stop, ok := airlock.AsStop(err); ok {
		outcome = "refused_" + string(stop.Reason)
	}
	if au := (*auditUnavailable)(nil); errors.As(err, &au) {
		outcome = "refused_" + kindAudit
	}
	rec := Record{Time: s.now().UTC(), Tenant: rq.t.Name, Request: "run", Limits: rq.job.Limits, Outcome: outcome, Error: clipMessage(err.Error())}
	if grantsSize(&rq.job.Grants) <= maxRefusedGrants {
		rec.Grants = redactGrants(rq.job.Grants)
	}
	if rq.session != nil {
		rec.Request, rec.Session = "session_run", rq.session.id
	}
	seq, _ := s.audit.addSeq(rec) // a refusal either way; a failure is counted and logged
	s.console.ran(rec, seq, nil)
}

func (s *Server) run(ctx context.Context, rq *runRequest) (airlock.Result, error) {
	if s.closing.Load() {
		return airlock.Result{}, unavailable("the server is shutting down")
	}
	if err := s.auditGate(); err != nil {
		return airlock.Result{}, err
	}
	s.inflight.Add(1)
	defer s.inflight.Done()
	if err := s.spend(ctx, rq.t); err != nil {
		return airlock.Result{}, err
	}
	job := &rq.job
	if rq.session != nil {
		job.Tier = rq.session.tier
		if job.Account == "" {
			job.Account = rq.session.account
		}
	}
	tier, err := rq.t.route(s, job)
	if err != nil {
		return airlock.Result{}, err
	}
	var rule string
	var digest approve.Digest
	var claims approve.Claims
	if rule = s.approvals.Requires(job, tier.Name()); rule != "" {
		digest = approve.Pinned(approve.Of(job, tier.Name(), rq.t.Name), s.imagePin(job))
		if rq.token == "" {
			return airlock.Result{}, &airlock.NotAdmitted{Reason: fmt.Sprintf("%s: rule %s requires an approval for this job (digest %s; POST /v1/approvals)", approve.Required, rule, digest)}
		}
		if claims, err = s.signer.Check(rq.token, digest, rq.t.Name, s.now()); err != nil {
			return airlock.Result{}, err
		}
	}
	queued := time.Now()
	release, err := s.acquire(ctx, rq.t)
	if err != nil {
		return airlock.Result{}, err
	}
	defer release()
	if rule != "" {
		// Redeemed once it holds a slot, so that a run refused for
		// capacity does not use up its token.
		if err := s.redeem(ctx, rq.token, claims); err != nil {
			return airlock.Result{}, err
		}
	}
	queueUS := monotime.Micros(queued)
	if !s.underBase(ctx) {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(s.base, cancel)()
	}
	s.metrics.inFlight.Add(1)
	start := time.Now()
	var res airlock.Result
	begin := func() {
		if rq.started != nil {
			rq.started()
		}
	}
	switch {
	case rule != "":
		// Recompute the digest over exactly what is handed to the tier, and
		// the image its name points at now, and let a tier that places
		// files re-check the placed bytes.
		final := *job
		plain := approve.Of(&final, tier.Name(), rq.t.Name)
		if approve.Pinned(plain, s.imagePin(&final)) != digest {
			err = &airlock.NotAdmitted{Reason: approve.Stale + ": the job or its image changed between approval check and execution"}
			break
		}
		ctx = airlock.WithPlacedCheck(ctx, approve.PlacedCheck(final, tier.Name(), rq.t.Name, plain))
		begin()
		if rq.session != nil {
			res, err = rq.session.run(ctx, final)
			res.Decision = append(s.router.Explain(&final).Lines(), res.Decision...)
		} else {
			res, err = s.router.RunOn(ctx, final, tier.Name())
		}
	case rq.session != nil:
		begin()
		res, err = rq.session.run(ctx, *job)
	default:
		// On the tier route chose and the tenant's rules and the
		// approval policy were checked against, or not at all.
		begin()
		res, err = s.router.RunOn(ctx, *job, tier.Name())
	}
	elapsed := time.Since(start)
	s.metrics.inFlight.Add(-1)
	if rq.session != nil {
		s.noteEnded(rq.session)
	}
	if err != nil && res.Error == nil && res.Stopped == nil {
		res.SetError(err)
	}
	if res.Tier == "" {
		res.Tier = tier.Name()
	}
	res.Replica = s.replica
	if aerr := s.record(rq, &res, digest, rule, queueUS, elapsed); aerr != nil && !s.cfg.AuditFailOpen {
		return airlock.Result{}, &auditUnavailable{err: aerr, ran: true}
	}
	return res, err
}

// imagePin is the digest a command job's image points at in the store now
// (see [approve.Pinned]): "" for other jobs, without a store, for the host
// view and for a reference the store would pull first. A reference the
// store refuses pins to "" too; its run fails when the tier acquires it.
func (s *Server) imagePin(job *airlock.Job) string {
	if job.Kind != airlock.KindCommand || s.images == nil || job.Image == image.Host {
		return ""
	}
	d, err := s.images.Current(job.Image)
	if err != nil || d == image.Host {
		return ""
	}
	return d
}

// record counts a run and writes its record, returning the error that
// kept the record from the trail.
func (s *Server) record(rq *runRequest, res *airlock.Result, digest approve.Digest, rule string, queueUS int64, elapsed time.Duration) error {
	out := outcome(res)
	s.metrics.run(res.Tier, out, elapsed, time.Duration(res.Timings.StartUS)*time.Microsecond)
	if res.Stopped != nil && res.Stopped.Reason == airlock.StopDenied {
		capability, _, _ := strings.Cut(res.Stopped.Detail, ":")
		counter(&s.metrics.denials, capability).Add(1)
	}
	job := &rq.job
	if digest == "" {
		digest = approve.Of(job, res.Tier, rq.t.Name)
	}
	rec := Record{
		Time: s.now().UTC(), Tenant: rq.t.Name, Request: "run", Digest: digest, Approval: rule,
		Tier: res.Tier, Image: res.Image, Decision: res.Decision, Grants: redactGrants(job.Grants), Limits: job.Limits,
		Clock: res.Clock, Seed: res.Seed, Outcome: out, Stopped: res.Stopped, ExitCode: res.ExitCode,
		Timings: res.Timings, QueueUS: queueUS, Output: OutputDigest(res),
	}
	if res.Error != nil {
		rec.Error = clipMessage(string(res.Error.Kind) + ": " + res.Error.Message)
	}
	if res.Stopped != nil && len(res.Stopped.Detail) > maxMessage {
		stop := *res.Stopped
		stop.Detail = clipMessage(stop.Detail)
		rec.Stopped = &stop
	}
	if rule != "" {
		if rec.Approver, rec.Reason = s.console.decisionOf(digest); rec.Approver == "" && s.shared() {
			s.syncDecided(s.base) // approved on another replica
			rec.Approver, rec.Reason = s.console.decisionOf(digest)
		}
	}
	if rq.session != nil {
		rec.Request, rec.Session = "session_run", rq.session.id
	}
	if (job.Kind.Language() || imageDigest(res.Image)) && jobSize(job) <= MaxAuditJob {
		kept := *job
		kept.Grants = rec.Grants
		rec.Job = &kept
	}
	seq, err := s.audit.addSeq(rec)
	s.console.ran(rec, seq, res)
	return err
}

// jobSize is about what a job takes in the audit trail: every field a
// kept job carries (the module as base64).
func jobSize(job *airlock.Job) int {
	n := len(job.Module)*4/3 + len(job.Code) + len(job.Stdin) + len(job.Entry) + len(job.Image) + len(job.Account) + len(job.Session)
	n += strsSize(job.Argv) + strsSize(job.Collect) + mapSize(job.Files) + mapSize(job.Env) + valueSize(job.Input)
	return n + grantsSize(&job.Grants)
}

// grantsSize is about what grants take in the audit trail.
func grantsSize(g *airlock.Grants) int {
	n := strsSize(g.FS.Read) + strsSize(g.FS.Copy) + mapSize(g.FS.At) + mapSize(g.Secrets)
	for _, r := range g.Net {
		n += len(r.Host) + len(r.Scheme) + strsSize(r.Methods) + strsSize(r.Paths) + 8*len(r.Ports) + 16
	}
	for _, c := range g.Credentials {
		n += len(c.Env) + len(c.Ref) + 16
	}
	return n
}

func strsSize(list []string) int {
	n := 0
	for _, s := range list {
		n += len(s) + 4
	}
	return n
}

func mapSize(m map[string]string) int {
	n := 0
	for k, v := range m {
		n += len(k) + len(v) + 6
	}
	return n
}

// valueSize is about the JSON size of a decoded input value.
func valueSize(v any) int {
	switch v := v.(type) {
	case string:
		return len(v) + 2
	case map[string]any:
		n := 2
		for k, e := range v {
			n += len(k) + 4 + valueSize(e)
		}
		return n
	case []any:
		n := 2
		for _, e := range v {
			n += 1 + valueSize(e)
		}
		return n
	}
	return 8
}

// maxGrants bounds a job's grants (about their JSON size): they are in
// every record of its runs, whatever the size of the job. A refused
// job's record keeps them up to maxRefusedGrants.
const (
	maxGrants        = 256 << 10
	maxRefusedGrants = 64 << 10
)

// maxReadGrants bounds a job's host paths (grants.fs.read): the digest
// of every run and approval request hashes what each names, a file's
// content up to a MiB, so thousands of names of one large file would
// cost gigabytes of hashing a request.
const maxReadGrants = 64

// maxMessage bounds an error message the server writes, in an answer
// and in the audit trail: one quoting a value of the job (a name, a
// host, a path) is cut there.
const maxMessage = 4 << 10

func clipMessage(s string) string { return value.Clip(s, maxMessage) }

// answer writes a run's outcome: the Result as is when the job reached a
// tier, else a refusal with the status the error implies.
func (s *Server) answer(w http.ResponseWriter, res airlock.Result, err error) {
	var ov *overloaded
	var au *auditUnavailable
	var ru *replicaUnavailable
	switch {
	case err != nil && errors.As(err, &ru):
		w.Header().Set("Retry-After", "5")
		s.refuse(w, http.StatusServiceUnavailable, kindOverloaded, ru.msg)
	case err != nil && errors.As(err, &au):
		w.Header().Set("Retry-After", "5")
		s.refuse(w, http.StatusServiceUnavailable, kindAudit, au.Error())
	case err != nil && errors.As(err, &ov):
		w.Header().Set("Retry-After", strconv.Itoa(ov.retryAfter))
		s.refuse(w, http.StatusTooManyRequests, kindOverloaded, ov.msg)
	case res.Tier == "" && err != nil:
		s.refuseErr(w, err)
	case res.Error != nil:
		writeResult(w, statusOf(res.Error.Kind), &res)
	default:
		writeResult(w, http.StatusOK, &res)
	}
}

// jsonType is the Content-Type header's value, shared (never modified) to
// spare an allocation per answer.
var jsonType = []string{"application/json"}

// writeResult writes a Result as writeJSON would, without reflection.
func writeResult(w http.ResponseWriter, status int, res *airlock.Result) {
	buf := getBuf()
	defer putBuf(buf)
	b, err := appendResult((*buf)[:0], res)
	if err != nil {
		writeJSON(w, status, res)
		return
	}
	*buf = append(b, '\n')
	extendWrite(w)
	w.Header()["Content-Type"] = jsonType
	w.WriteHeader(status)
	_, _ = w.Write(*buf)
}

// tenantJob authenticates a request and decodes its job, answering the
// request itself when either fails; validate also checks the job's shape.
// The body is read under the large-body slots (see gateBody), which the
// request holds until it ends.
func (s *Server) tenantJob(w http.ResponseWriter, r *http.Request, validate bool) (*tenant, airlock.Job, bool) {
	t := s.tenant(w, r)
	if t == nil {
		return nil, airlock.Job{}, false
	}
	context.AfterFunc(r.Context(), s.gateBody(r, t))
	job, err := decodeJob(w, r)
	if err == nil && validate {
		err = job.Validate()
	}
	if err != nil {
		s.refuseErr(w, err)
		return nil, job, false
	}
	return t, job, true
}

func (s *Server) handleRun(w http.ResponseWriter, r *http.Request) {
	t, job, ok := s.tenantJob(w, r, false)
	if !ok {
		return
	}
	if job.Session != "" || job.Lifecycle == airlock.LifecycleSession || job.Lifecycle == airlock.LifecyclePersistent {
		s.refuseErr(w, jobs.Invalid("session", "open a session with POST /v1/sessions and run in it with POST /v1/sessions/{id}/run"))
		return
	}
	s.respond(w, r, &runRequest{t: t, job: job, token: r.Header.Get(ApprovalHeader)})
}

// respond runs rq, in its session if it has one, and answers it: as it
// runs when the request accepts a stream (see streamFormat), else with
// the one Result.
func (s *Server) respond(w http.ResponseWriter, r *http.Request, rq *runRequest) {
	run := s.execute
	if rq.session != nil {
		run = s.sessionRun
	}
	ctx := r.Context()
	if format := streamFormat(r); format != "" {
		st := s.newStream(w, format)
		rq.started = st.start
		res, err := run(airlock.WithOutput(ctx, st.sink), rq)
		st.finish(res, err)
		return
	}
	res, err := run(ctx, rq)
	s.answer(w, res, err)
}

func (s *Server) handleExplain(w http.ResponseWriter, r *http.Request) {
	t, job, ok := s.tenantJob(w, r, true)
	if !ok {
		return
	}
	out := struct {
		Explanation any    `json:"explanation"`
		Tenant      string `json:"tenant_refusal,omitempty"`
		Approval    string `json:"approval_required,omitempty"`
	}{}
	admitErr := t.admit(&job) // first: it sets the tenant's situation
	// An image the store refuses makes the job invalid, as its run finds
	// when a tier acquires the image.
	if admitErr == nil && job.Image != "" && s.images != nil {
		if err := s.images.Check(job.Image); err != nil {
			var ie *image.Error
			if errors.As(err, &ie) && ie.Invalid {
				err = jobs.Invalid("image", "%v", err)
			}
			s.refuseErr(w, err)
			return
		}
	}
	x := s.router.Explain(&job)
	out.Explanation = x
	if admitErr != nil {
		out.Tenant = admitErr.Error()
	} else if x.Chosen != "" {
		if err := t.onTier(s.chosen(x.Chosen), &job); err != nil {
			out.Tenant = err.Error()
		}
		out.Approval = s.approvals.Requires(&job, x.Chosen)
	}
	writeJSON(w, http.StatusOK, out)
}

type tierInfo struct {
	Name        string        `json:"name"`
	Level       airlock.Level `json:"level"`
	Available   bool          `json:"available"`
	Unavailable string        `json:"unavailable,omitempty"`
	Sessions    bool          `json:"sessions"`
	Allowed     bool          `json:"allowed"`
	// PoolError is why the tier's warm pool last failed to start an
	// instance; empty once a start succeeds.
	PoolError string `json:"pool_error,omitempty"`
}

func (s *Server) handleTiers(w http.ResponseWriter, r *http.Request) {
	t := s.tenant(w, r)
	if t == nil {
		return
	}
	out := []tierInfo{}
	for _, tr := range s.router.Tiers() {
		ti := tierInfo{Name: tr.Name(), Level: tr.Level(), Available: true, Allowed: t.allowTier(tr.Name()) == nil}
		if err := s.router.Unavailable(tr.Name()); err != nil {
			ti.Available, ti.Unavailable = false, err.Error()
		}
		_, ti.Sessions = tr.(airlock.SessionTier)
		if p, ok := s.pools[tr.Name()]; ok {
			ti.PoolError = p.PoolStats().LastError
		}
		out = append(out, ti)
	}
	writeJSON(w, http.StatusOK, out)
}

type imageInfo struct {
	// Names are the catalogue names and pinned references the tenant may
	// put in a job's image field for it.
	Names     []string `json:"names"`
	Digest    string   `json:"digest"`
	SizeBytes int64    `json:"size_bytes,omitempty"`
	Default   bool     `json:"default,omitempty"`
	// Warm is, per tier keeping a pool of the image, how many of its
	// sandboxes are ready now.
	Warm map[string]int `json:"warm,omitempty"`
}

// warmImages returns, per image digest, the ready sandboxes of each tier
// that keeps a pool of it.
func (s *Server) warmImages() map[string]map[string]int {
	out := map[string]map[string]int{}
	for tier, p := range s.pools {
		for d, st := range p.PoolStats().Images {
			if st.Size == 0 {
				continue
			}
			if out[d] == nil {
				out[d] = map[string]int{}
			}
			out[d][tier] = st.Ready
		}
	}
	return out
}

// handleImages lists the images the tenant's command jobs may name that
// the store holds (an allowed reference the store has not pulled yet is
// not listed).
func (s *Server) handleImages(w http.ResponseWriter, r *http.Request) {
	t := s.tenant(w, r)
	if t == nil {
		return
	}
	may := func(ref string) bool { return len(t.Images) == 0 || slices.Contains(t.Images, ref) }
	out := []imageInfo{}
	warm := s.warmImages()
	if s.images == nil {
		if may(image.Host) {
			out = append(out, imageInfo{Names: []string{image.Host}, Digest: image.Host, Default: true, Warm: warm[image.Host]})
		}
		writeJSON(w, http.StatusOK, out)
		return
	}
	infos, err := s.images.List()
	if err != nil {
		s.refuseErr(w, fmt.Errorf("listing images: %w", err))
		return
	}
	for _, in := range infos {
		var names []string
		for _, n := range slices.Concat(in.Names, in.Refs, []string{in.Digest}) {
			if may(n) {
				names = append(names, n)
			}
		}
		if len(names) == 0 {
			continue
		}
		out = append(out, imageInfo{Names: names, Digest: in.Digest, SizeBytes: in.Size,
			Default: slices.Contains(in.Names, t.defImage) || slices.Contains(in.Refs, t.defImage), Warm: warm[in.Digest]})
	}
	if s.images.AllowsHost() && may(image.Host) {
		out = append(out, imageInfo{Names: []string{image.Host}, Digest: image.Host, Default: t.defImage == image.Host, Warm: warm[image.Host]})
	}
	writeJSON(w, http.StatusOK, out)
}

// Listings of GET /v1/audit in progress: each may write a tenant's 256
// latest records, a MiB or more each, to a client that reads slowly.
const (
	auditListingsServer = 8
	auditListingsTenant = 2
	// auditListingTime bounds how long a listing may take to be written.
	auditListingTime = time.Minute
)

func (s *Server) handleAudit(w http.ResponseWriter, r *http.Request) {
	t := s.tenant(w, r)
	if t == nil {
		return
	}
	release, ok := takeSlots(s.listings, t.listings)
	if !ok {
		s.answer(w, airlock.Result{}, &overloaded{fmt.Sprintf("too many audit listings in progress (at most %d per tenant, %d in all); retry", auditListingsTenant, auditListingsServer), 1})
		return
	}
	defer release()
	// Each write has its own bound (answerWriteTimeout); the listing as a
	// whole has this one, so a client that reads a trickle gives its
	// slot back too.
	deadline := time.Now().Add(auditListingTime)
	// Written a record at a time: the answer is never whole in memory.
	var next func() (Record, bool)
	if s.store.Shared() {
		recs, err := s.sharedRecords(r.Context(), t.Name)
		if err != nil {
			s.answer(w, airlock.Result{}, s.stateUnavailable("the shared audit records cannot be read", err))
			return
		}
		next = func() (Record, bool) {
			if len(recs) == 0 {
				return Record{}, false
			}
			rec := recs[0]
			recs[0] = Record{}
			recs = recs[1:]
			return rec, true
		}
	} else {
		var n uint64
		end := s.audit.recentEnd(t.Name)
		next = func() (Record, bool) {
			if n >= end {
				return Record{}, false
			}
			rec, num, ok := s.audit.recentAt(t.Name, n)
			if !ok || num >= end {
				return Record{}, false
			}
			n = num + 1
			return rec, true
		}
	}
	w.Header()["Content-Type"] = jsonType
	w.WriteHeader(http.StatusOK)
	buf := getBuf()
	defer putBuf(buf)
	b := append((*buf)[:0], '[')
	first := true
	for {
		rec, ok := next()
		if !ok {
			break
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		line, err := appendRecord(b, &rec)
		if err != nil {
			line, _ = json.Marshal(&rec)
			line = append(b, line...)
		}
		b = line
		if len(b) >= 64<<10 {
			if time.Now().After(deadline) {
				return // cut short: the client sees an incomplete answer
			}
			extendWrite(w)
			if _, err := w.Write(b); err != nil {
				return // the client went away, or was too slow
			}
			b = b[:0]
		}
	}
	b = append(b, "]\n"...)
	extendWrite(w)
	_, _ = w.Write(b)
	*buf = b[:0]
}

// takeSlots takes one slot of each channel without waiting, or none.
func takeSlots(chans ...chan struct{}) (release func(), ok bool) {
	var held []chan struct{}
	release = func() {
		for _, ch := range held {
			<-ch
		}
	}
	for _, ch := range chans {
		select {
		case ch <- struct{}{}:
			held = append(held, ch)
		default:
			release()
			return nil, false
		}
	}
	return release, true
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	out := map[string]any{"ok": true}
	status := http.StatusOK
	if s.closing.Load() {
		out["ok"], out["shutting_down"] = false, true
		status = http.StatusServiceUnavailable
	}
	if err := s.audit.failing(); err != nil {
		// Anyone may ask /healthz: the error itself (a path, a device)
		// goes to the server's log, not here.
		out["ok"], out["audit"] = false, "failing: audit records cannot be written; the server's log says why"
		status = http.StatusServiceUnavailable
	}
	writeJSON(w, status, out)
}

func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	s.metrics.write(w, s.pools)
	s.writeQueued(w)
	s.audit.writeMetrics(w)
}
