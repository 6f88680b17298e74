package server

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/approve"
	"github.com/airlock-sandbox/airlock/escalate"
	"github.com/airlock-sandbox/airlock/internal/jobs"
)

// maxPending and maxPendingPerTenant bound the approvals waiting for a
// decision, server-wide and per tenant (so one tenant cannot crowd out the
// others).
const (
	maxPending          = 4096
	maxPendingPerTenant = 256
)

// maxPendingBytes and maxPendingBytesPerTenant bound the memory pending
// jobs hold (about their size, see jobSize): a job may be 32 MiB.
const (
	maxPendingBytes          = 512 << 20
	maxPendingBytesPerTenant = 96 << 20
)

// pending is a job waiting for an approver.
type pending struct {
	tenant  *tenant
	job     airlock.Job // secret values redacted
	tier    string
	rule    string
	created time.Time
	image   string // the image digest the approval binds ("": none, or not known here)
	size    int    // about the job's size (jobSize)

	// hidden counts the job's hidden characters, for the console's list:
	// counted once, not on every reload of every approver's page.
	hiddenOnce sync.Once
	hidden     int
}

// hiddenChars returns how many characters the job's display escapes and
// flags (approve.Display.Hidden).
func (p *pending) hiddenChars() int {
	p.hiddenOnce.Do(func() {
		job := p.job
		p.hidden = approve.DisplayOf(&job, p.tier, p.tenant.Name).Hidden
	})
	return p.hidden
}

// shown is a pending job as a person should see it, with the image
// content its approval binds: as bound on this replica's request, else
// what the job's image points at now (a request taken by another replica;
// a name moved since makes the approval stale anyway).
func (s *Server) shown(p *pending, tenant string) approve.Display {
	job := p.job
	d := approve.DisplayOf(&job, p.tier, tenant)
	d.ImageDigest = cmp.Or(p.image, s.imagePin(&job))
	return d
}

type approvalRequest struct {
	Digest   approve.Digest `json:"digest"`
	Tier     string         `json:"tier"`
	Rule     string         `json:"rule,omitempty"` // the rule that requires approval; empty: none does
	Required bool           `json:"required"`
	// Job is the pending job as it will run, for machines. Its strings are
	// raw: a hidden character in them is invisible when rendered, so a
	// person must be shown Display instead.
	Job     *airlock.Job     `json:"job,omitempty"`
	Display *approve.Display `json:"display,omitempty"`
	Tenant  string           `json:"tenant,omitempty"`
}

type approvalToken struct {
	Digest  approve.Digest `json:"digest"`
	Token   string         `json:"token"`
	Expires time.Time      `json:"expires"`
}

func (s *Server) approvalTTL() time.Duration {
	if s.cfg.Approvals == nil {
		return 15 * time.Minute
	}
	return s.cfg.Approvals.TTL.or(15 * time.Minute)
}

// handleRequestApproval computes the digest of a job exactly as it would
// run (limits resolved for the tenant, tier chosen by the router) and
// keeps it for an approver to see.
func (s *Server) handleRequestApproval(w http.ResponseWriter, r *http.Request) {
	t, job, ok := s.tenantJob(w, r, false)
	if !ok {
		return
	}
	if job.Session != "" {
		// A job for a session is approved for that session only: its id is
		// part of the digest, and its runs are routed to the session's tier.
		s.mu.Lock()
		ss := s.sessions[job.Session]
		s.mu.Unlock()
		if ss == nil || ss.tenant != t {
			s.refuse(w, http.StatusNotFound, kindNotFound, "unknown session "+job.Session)
			return
		}
		if job.Tier != "" && job.Tier != escalate.TierAuto && job.Tier != ss.tier {
			s.refuseErr(w, jobs.Invalid("tier", "the session runs on %s, not %s", ss.tier, job.Tier))
			return
		}
		job.Tier, job.Lifecycle = ss.tier, ""
		if job.Account == "" {
			job.Account = ss.account // as its runs in the session are
		}
	}
	tier, err := t.route(s, &job)
	if err != nil {
		s.refuseErr(w, err)
		return
	}
	pin := s.imagePin(&job)
	d := approve.Pinned(approve.Of(&job, tier.Name(), t.Name), pin)
	rule := s.approvals.Requires(&job, tier.Name())
	if rule != "" {
		// A pending job is kept, shared with the other replicas and
		// shown on every approver's console: asking spends one of the
		// tenant's runs per minute, as a run does.
		if err := s.spend(r.Context(), t); err != nil {
			s.answer(w, airlock.Result{}, err)
			return
		}
		kept := job
		kept.Grants = redactGrants(job.Grants)
		size := jobSize(&kept)
		s.mu.Lock()
		mine, mineBytes, all := 0, size, size
		for pd, p := range s.pending {
			if pd == d {
				continue // asked again: replaced
			}
			all += p.size
			if p.tenant == t {
				mine++
				mineBytes += p.size
			}
		}
		if len(s.pending) >= maxPending || mine >= maxPendingPerTenant || mineBytes > maxPendingBytesPerTenant || all > maxPendingBytes {
			s.mu.Unlock()
			s.answer(w, airlock.Result{}, &overloaded{"too many approvals pending (or too large); wait for decisions, or for requests to expire", 30})
			return
		}
		p := &pending{tenant: t, job: kept, tier: tier.Name(), rule: rule, created: s.now(), image: pin, size: size}
		s.pending[d] = p
		s.mu.Unlock()
		if err := s.sharePending(r.Context(), d, p); err != nil {
			s.answer(w, airlock.Result{}, s.stateUnavailable("the approval request cannot be shared with the other replicas", err))
			return
		}
		s.console.changed()
	}
	writeJSON(w, http.StatusOK, approvalRequest{Digest: d, Tier: tier.Name(), Rule: rule, Required: rule != ""})
}

// approver reports whether the request carries a key that may approve
// jobs of tenant t.
func approver(r *http.Request, t *tenant) bool {
	key, ok := bearer(r)
	if !ok {
		return false
	}
	sum := sha256.Sum256([]byte(key))
	found := false
	for _, h := range t.ApproverSHA256 {
		b, _ := hex.DecodeString(h)
		if subtle.ConstantTimeCompare(sum[:], b) == 1 {
			found = true
		}
	}
	return found
}

// pendingFor finds a pending approval the caller may see: its tenant, or
// one of its approvers. Anyone else learns nothing, not even that it exists.
func (s *Server) pendingFor(w http.ResponseWriter, r *http.Request) (*pending, approve.Digest, bool) {
	d := approve.Digest(r.PathValue("digest"))
	// Only a tenant's or an approver's key makes the shared state be
	// asked: anyone else is answered as for a digest nobody asked for.
	if !s.mayAskApprovals(r) {
		s.refuse(w, http.StatusNotFound, kindNotFound, "no pending approval "+string(d))
		return nil, d, false
	}
	s.syncPending(r.Context())
	s.mu.Lock()
	p := s.pending[d]
	s.mu.Unlock()
	if p != nil && s.now().Sub(p.created) > s.approvalTTL() {
		p = nil
	}
	if p == nil {
		s.refuse(w, http.StatusNotFound, kindNotFound, "no pending approval "+string(d))
		return nil, d, false
	}
	return p, d, true
}

func (s *Server) handleShowApproval(w http.ResponseWriter, r *http.Request) {
	p, d, ok := s.pendingFor(w, r)
	if !ok {
		return
	}
	key, _ := bearer(r)
	i, isTenant := s.keys.find(key)
	if !(isTenant && s.tenants[i] == p.tenant) && !approver(r, p.tenant) {
		s.refuse(w, http.StatusNotFound, kindNotFound, "no pending approval "+string(d))
		return
	}
	release, ok := s.approvalSlots(w, r)
	if !ok {
		return
	}
	defer release()
	job := p.job
	shown := s.shown(p, p.tenant.Name)
	writeJSON(w, http.StatusOK, approvalRequest{Digest: d, Tier: p.tier, Rule: p.rule, Required: true, Job: &job, Display: &shown, Tenant: p.tenant.Name})
}

// handleListApprovals lists the pending approvals the caller may see, the
// oldest first: a tenant's own, and those of every tenant it approves for.
func (s *Server) handleListApprovals(w http.ResponseWriter, r *http.Request) {
	key, ok := bearer(r)
	i, isTenant := s.keys.find(key)
	if !ok || (!isTenant && !s.isApprover(r)) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="airlock"`)
		s.refuse(w, http.StatusUnauthorized, kindUnauthorized, "a tenant's or an approver's API key is needed (Authorization: Bearer KEY)")
		return
	}
	type entry struct {
		d approve.Digest
		p *pending
	}
	release, ok := s.approvalSlots(w, r)
	if !ok {
		return
	}
	defer release()
	var mine []entry
	s.syncPending(r.Context())
	now := s.now()
	s.mu.Lock()
	for d, p := range s.pending {
		if now.Sub(p.created) > s.approvalTTL() {
			continue
		}
		if (isTenant && s.tenants[i] == p.tenant) || approver(r, p.tenant) {
			mine = append(mine, entry{d, p})
		}
	}
	s.mu.Unlock()
	slices.SortFunc(mine, func(a, b entry) int {
		if c := a.p.created.Compare(b.p.created); c != 0 {
			return c
		}
		return strings.Compare(string(a.d), string(b.d))
	})
	// Written one approval at a time: each holds its job twice (raw and
	// displayed), and a tenant's pending jobs may take 96 MiB.
	w.Header()["Content-Type"] = jsonType
	w.WriteHeader(http.StatusOK)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // as writeJSON
	sep := "["
	for _, e := range mine {
		job := e.p.job
		shown := s.shown(e.p, e.p.tenant.Name)
		buf.Reset()
		buf.WriteString(sep)
		if enc.Encode(approvalRequest{Digest: e.d, Tier: e.p.tier, Rule: e.p.rule, Required: true, Job: &job, Display: &shown, Tenant: e.p.tenant.Name}) != nil {
			continue
		}
		extendWrite(w)
		if _, err := w.Write(bytes.TrimSuffix(buf.Bytes(), []byte("\n"))); err != nil {
			return // the client went away, or did not read
		}
		sep = ","
	}
	if sep == "[" {
		_, _ = io.WriteString(w, "[")
	}
	extendWrite(w)
	_, _ = io.WriteString(w, "]\n")
}

// approvalSlots takes a slot for showing or listing pending jobs, which
// may be tens of MiB each: one of the server's listings, and for a tenant's
// key one of its own (see handleAudit). It answers the request itself
// when none is free.
func (s *Server) approvalSlots(w http.ResponseWriter, r *http.Request) (release func(), ok bool) {
	key, _ := bearer(r)
	chans := []chan struct{}{s.listings}
	if i, isTenant := s.keys.find(key); isTenant {
		chans = append(chans, s.tenants[i].listings)
	}
	if release, ok = takeSlots(chans...); !ok {
		s.answer(w, airlock.Result{}, &overloaded{fmt.Sprintf("too many listings in progress (at most %d per tenant, %d in all); retry", auditListingsTenant, auditListingsServer), 1})
	}
	return release, ok
}

// mayAskApprovals reports whether r carries a tenant's or an approver's
// key.
func (s *Server) mayAskApprovals(r *http.Request) bool {
	key, _ := bearer(r)
	_, isTenant := s.keys.find(key)
	return isTenant || s.isApprover(r)
}

// isApprover reports whether r's key approves for any tenant.
func (s *Server) isApprover(r *http.Request) bool {
	for _, t := range s.tenants {
		if approver(r, t) {
			return true
		}
	}
	return false
}

// handleApprove issues a token for a pending digest to one of the
// tenant's approvers.
func (s *Server) handleApprove(w http.ResponseWriter, r *http.Request) {
	p, d, ok := s.pendingFor(w, r)
	if !ok {
		return
	}
	if !approver(r, p.tenant) {
		// The tenant, who asked, is told it may not approve; anyone else
		// learns nothing, not even that the approval exists (a digest can
		// be computed for a guessed job).
		key, _ := bearer(r)
		if i, isTenant := s.keys.find(key); isTenant && s.tenants[i] == p.tenant {
			s.refuse(w, http.StatusForbidden, kindForbidden, "this key may not approve jobs of this tenant")
		} else {
			s.refuse(w, http.StatusNotFound, kindNotFound, "no pending approval "+string(d))
		}
		return
	}
	key, _ := bearer(r)
	dc, err := s.decide(r.Context(), p, d, approverID(sha256.Sum256([]byte(key))), "", false, false)
	if err != nil {
		s.answer(w, airlock.Result{}, err)
		return
	}
	writeJSON(w, http.StatusOK, approvalToken{Digest: d, Token: dc.Token, Expires: dc.Expires})
}
