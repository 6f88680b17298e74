package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/approve"
	"github.com/airlock-sandbox/airlock/internal/mcpwrap"
	"github.com/airlock-sandbox/airlock/internal/version"
)

// ToolPolicy and ToolRule are a wrapped server's per-tool policy
// (WrappedServer.Policy): allow or deny tools by name, approval bound to
// a call's exact arguments, argument size and rate limits, refused
// argument patterns and path arguments confined to roots.
type (
	ToolPolicy = mcpwrap.Policy
	ToolRule   = mcpwrap.Rule
)

// wrappedStart bounds a wrapped server's start and MCP handshake.
const wrappedStart = 2 * time.Minute

// wrapped is one tenant's wrapped server: its declaration and the
// streamable HTTP handler of its sessions, each with its own instance.
type wrapped struct {
	spec    WrappedServer
	tenant  *tenant
	life    time.Duration
	idle    time.Duration
	handler *mcp.StreamableHTTPHandler
	rates   *mcpwrap.Rates // the policy's rate limits, across its instances
}

// wrappedKey carries a new session's instance from the request to the SDK
// handler's getServer.
type wrappedKey struct{}

// versions is what getServer answers for a request of an existing
// session: the SDK asks it only for the protocol versions it speaks.
var versions = sync.OnceValue(func() *mcp.Server {
	return mcp.NewServer(&mcp.Implementation{Name: "airlock-mcp-wrap", Version: version.String()}, nil)
})

// initWrapped builds the tenants' wrapped servers' handlers.
func (s *Server) initWrapped() error {
	s.wrapped = map[string]*wrapped{}
	s.instances = map[*mcpwrap.Wrapper]*tenant{}
	for i, t := range s.tenants {
		for j, spec := range t.MCPWrapped {
			wr := &wrapped{spec: spec, tenant: t, rates: mcpwrap.NewRates(spec.Policy)}
			most := time.Duration(t.limits.Max.WallMS) * time.Millisecond
			wr.life = spec.MaxLifetime.or(most)
			if wr.life > most {
				return fmt.Errorf("tenants[%d].mcp_wrapped[%d].max_lifetime: %v is above the tenant's maximum wall clock %v (limits.max.wall_ms)", i, j, wr.life, most)
			}
			wr.idle = spec.IdleTimeout.or(s.cfg.SessionTTL.or(10 * time.Minute))
			// The instance's own idle timeout ends it (and so its MCP
			// session) first, for idleness; the HTTP session's, a little
			// later, only backs it up.
			wr.handler = mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
				if w, ok := r.Context().Value(wrappedKey{}).(*mcpwrap.Wrapper); ok {
					return w.Server()
				}
				return versions()
			}, &mcp.StreamableHTTPOptions{SessionTimeout: wr.idle + time.Second, MaxRequestBodyBytes: 4 << 20})
			s.wrapped[t.Name+"/"+spec.Name] = wr
		}
	}
	return nil
}

// handleWrapped serves /mcp/wrapped/{name}: the tenant's MCP sessions
// with one of its wrapped servers. A request that opens a session starts
// the session's own instance first; a session lives until its client
// closes it or its instance ends (idle, lifetime, exit), and is never
// served to another tenant (the SDK binds it to the key that opened it).
func (s *Server) handleWrapped(w http.ResponseWriter, r *http.Request) {
	t := s.tenant(w, r)
	if t == nil {
		return
	}
	wr := s.wrapped[t.Name+"/"+r.PathValue("name")]
	if wr == nil {
		s.refuse(w, http.StatusNotFound, kindNotFound, "tenant "+t.Name+" has no wrapped MCP server named "+r.PathValue("name"))
		return
	}
	// A body is read under the large-body slots, as on /mcp.
	w, release := s.gateMCP(w, r, t)
	defer release()
	if r.Method != http.MethodPost || r.Header.Get("Mcp-Session-Id") != "" {
		wr.handler.ServeHTTP(w, r)
		return
	}
	inst, err := s.startWrapped(r.Context(), wr)
	if err != nil {
		// Overloaded (429), the shared state not answering (503), or the
		// refusal the error's kind implies.
		s.answer(w, airlock.Result{}, err)
		return
	}
	wr.handler.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), wrappedKey{}, inst)))
	// The instance is the session's: it ends with it. A request that
	// opened no session leaves the instance to nobody.
	var sess *mcp.ServerSession
	for ss := range inst.Server().Sessions() {
		sess = ss
	}
	if sess == nil {
		_ = inst.Close()
		return
	}
	go func() {
		select {
		case <-inst.Done():
		case <-waitSession(sess):
		}
		_ = inst.Close()
	}()
}

func waitSession(ss *mcp.ServerSession) <-chan struct{} {
	c := make(chan struct{})
	go func() { _ = ss.Wait(); close(c) }()
	return c
}

// startWrapped starts an instance of wr for a new session, counted among
// the tenant's open sessions.
func (s *Server) startWrapped(ctx context.Context, wr *wrapped) (*mcpwrap.Wrapper, error) {
	t, spec := wr.tenant, wr.spec
	// A new instance starts a sandbox, as a run does (see openSession).
	if err := s.spend(ctx, t); err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, unavailable("the server is shutting down")
	}
	limit := s.cfg.MaxSessions
	if limit == 0 {
		limit = 16
	}
	if t.nsess >= limit {
		s.mu.Unlock()
		return nil, &overloaded{fmt.Sprintf("tenant %s has %d sessions open (the maximum); close one", t.Name, limit), 5}
	}
	t.nsess++
	s.mu.Unlock()
	release := func() {
		s.mu.Lock()
		t.nsess--
		s.mu.Unlock()
	}
	job := airlock.Job{Kind: airlock.KindCommand, Argv: spec.Argv, Image: spec.Image, Grants: spec.Grants,
		Situation: spec.Situation, Tier: spec.Tier}
	if job.Situation == "" {
		job.Situation = t.defSit
	}
	if job.Image == "" {
		job.Image = t.defImage
	}
	// The instance lives its lifetime, not a one-shot job's wall clock;
	// its CPU and output are the tenant's maxima.
	job.Limits = airlock.Limits{WallMS: wr.life.Milliseconds(), CPUMS: t.limits.Max.CPUMS, OutputBytes: t.limits.Max.OutputBytes}
	tier, err := s.router.Route(&job)
	if err == nil {
		err = t.allowTier(tier.Name())
	}
	if err != nil {
		release()
		return nil, err
	}
	at, ok := tier.(airlock.Attacher)
	if !ok {
		release()
		return nil, &airlock.NotAdmitted{Tier: tier.Name(), Reason: "cannot run a job attached"}
	}
	hosts := spec.OutputHosts
	if len(hosts) == 0 {
		hosts = s.cfg.OutputHosts
	}
	tierName := tier.Name()
	inst, err := mcpwrap.Start(ctx, at, job, mcpwrap.Config{
		Argv: spec.Argv, Policy: spec.Policy, OutputHosts: hosts, CallTimeout: time.Duration(spec.CallTimeout),
		MaxResultBytes: spec.MaxResultBytes, IdleTimeout: wr.idle, Signer: s.signer, Tenant: t.Name, Redeem: s.redeem,
		Audit: func(rec mcpwrap.Record) { s.auditWrapped(t, spec.Name, tierName, rec) },
		Now:   s.now, Rates: wr.rates,
	}, wrappedStart)
	if err != nil {
		release()
		var inv *airlock.InvalidJob
		var na *airlock.NotAdmitted
		if errors.As(err, &inv) || errors.As(err, &na) {
			return nil, err
		}
		if airlock.KindOf(err) == airlock.ErrRuntime {
			// A server that speaks no MCP is the operator's configuration
			// failing, not the tenant's request: airlock's failure here,
			// its cause in the server's log.
			return nil, fmt.Errorf("wrapped server %s: %v", spec.Name, err)
		}
		return nil, fmt.Errorf("wrapped server %s: %w", spec.Name, err)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = inst.Close()
		release()
		return nil, unavailable("the server is shutting down")
	}
	s.instances[inst] = t
	s.mu.Unlock()
	inst.Event("start", fmt.Sprintf("%s on %s", spec.Argv[0], tierName))
	go func() {
		<-inst.Done()
		// Kept among the instances until its sandbox is gone, so that
		// closing the server waits for it.
		_ = inst.Close()
		s.mu.Lock()
		_, ok := s.instances[inst]
		delete(s.instances, inst)
		s.mu.Unlock()
		if ok {
			release()
		}
	}()
	return inst, nil
}

// auditWrapped puts a wrapped server's record in the tenant's audit trail.
func (s *Server) auditWrapped(t *tenant, name, tier string, rec mcpwrap.Record) {
	r := Record{Time: rec.Time, Tenant: t.Name, Request: "mcp_wrapped", Session: name,
		Digest: approve.Digest(rec.ArgsDigest), Outcome: rec.Event}
	if rec.Decision != "" {
		r.Outcome = rec.Event + ":" + rec.Decision
	}
	if rec.Tool != "" {
		r.Reason = "tool " + rec.Tool
		if rec.Reason != "" {
			r.Reason += ": " + rec.Reason
		}
	} else {
		r.Reason = rec.Reason
	}
	if rec.Decision == "relayed" {
		r.Tier = tier
		r.Timings.RunUS = rec.DurationMS * 1000
	}
	if rec.Approved {
		r.Approval = "mcp_wrapped.policy"
	}
	_ = s.audit.add(r)
}

// closeWrapped ends every wrapped server's instance.
func (s *Server) closeWrapped() {
	s.mu.Lock()
	insts := make([]*mcpwrap.Wrapper, 0, len(s.instances))
	for inst := range s.instances {
		insts = append(insts, inst)
	}
	s.mu.Unlock()
	for _, inst := range insts {
		_ = inst.Close()
	}
}
