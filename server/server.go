// Package server is airlock's HTTP API: the v1 wire format (a Job in, a
// Result out) behind API keys, per-tenant quotas, sessions, approvals bound
// to the exact job, an audit trail and Prometheus metrics.
package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/approve"
	"github.com/airlock-sandbox/airlock/escalate"
	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/internal/hostpath"
	"github.com/airlock-sandbox/airlock/internal/httpguard"
	"github.com/airlock-sandbox/airlock/internal/mcpwrap"
	"github.com/airlock-sandbox/airlock/internal/state"
)

// Options are what a server takes besides its configuration.
type Options struct {
	// Audit, when set, receives the audit trail instead of Config.Audit.
	Audit io.Writer
	// Now is the clock for approvals (default time.Now).
	Now func() time.Time
	// Images is the store the tiers were given for command jobs' images:
	// a job naming none is bound to its default before approval and the
	// tenants' image lists, and /v1/images lists what a tenant may use.
	// Nil: the tiers run command jobs in the host view.
	Images *image.Store
	// Log receives the server's operational messages, such as an audit
	// trail that cannot be written (default os.Stderr).
	Log io.Writer

	// clockError is added to this replica's clock, for the tests of
	// replicas whose clocks disagree.
	clockError time.Duration
}

type tenant struct {
	Tenant
	limits    airlock.LimitPolicy
	roots     hostpath.Roots
	allowed   []airlock.Situation // the situations its jobs may name
	defSit    airlock.Situation   // what a job that names none runs as
	defImage  string              // what a command job that names none runs in ("": the host view)
	tierNames []string            // the server's tiers (one slice for all tenants), for naming a job's unknown tier
	pullFrom  []string            // the registries a job's image reference may be pulled from
	slots     chan struct{}
	// bigBodies are its large-body slots (see gateBody).
	bigBodies chan struct{}
	listings  chan struct{} // its GET /v1/audit listings in progress
	waiting   atomic.Int64
	rate      *rate.Limiter // runs per minute on the embedded state
	lease     *leased       // runs per minute on a shared state
	share     *slotShare    // runs in flight across the replicas of a shared state
	nsess     int           // open sessions, under Server.mu
	// mcpOpening counts the requests opening an MCP session on /mcp that
	// are being served (see mcpRoom).
	mcpOpening httpguard.MCPRoom
}

// Server serves the API. Build it with [New]; it owns the tiers it was
// given and closes them in [Server.Close].
type Server struct {
	cfg       Config
	tiers     []airlock.Tier
	images    *image.Store
	router    *escalate.Router
	pools     map[string]airlock.Pooler
	tenants   []*tenant
	keys      keyring
	approvals approve.Policy
	signer    *approve.Signer
	now       func() time.Time
	audit     *auditor
	metrics   metrics
	mcp       mcpServers
	wrapped   map[string]*wrapped // by tenant/name
	console   *console
	mux       *http.ServeMux
	handler   http.Handler
	bigBodies chan struct{} // the server's large-body slots (see gateBody)
	listings  chan struct{} // GET /v1/audit listings in progress

	store       state.Store // what the replicas share
	replica     string      // this replica's name
	advertise   string      // where the other replicas reach this one
	warmOnce    sync.Once
	warmed      chan struct{} // closed once every pool has been full
	stateDown   atomic.Bool   // the last readiness probe could not reach the shared state
	stateLogged atomic.Int64  // when a request last logged a shared state error (Unix ns)
	clockError  time.Duration // Options.clockError
	clockOffset atomic.Int64  // the shared state's clock less this replica's (ns)

	base     context.Context
	cancel   context.CancelFunc
	inflight sync.WaitGroup
	closing  atomic.Bool

	mu        sync.Mutex
	instances map[*mcpwrap.Wrapper]*tenant // wrapped servers' running instances
	sessions  map[string]*session
	pending   map[approve.Digest]*pending
	// pendingSeen are the requests of other replicas read from the
	// shared state (when they were made), kept or not: not read again.
	pendingSeen map[approve.Digest]time.Time
	// opening are the sessions registered whose sandbox is starting.
	opening map[string]bool
	stopJan chan struct{}
	janDone chan struct{}
	closed  bool
}

// New builds the router over tiers and the handlers. The tiers are the
// caller's to build, with the limits of cfg.TierLimits for the
// configuration's limits to hold; jobs run on them as the router and each
// tenant's rules allow. When New succeeds the server owns the tiers and
// closes those that are io.Closers in [Server.Close]; when it fails they
// are still the caller's. Tiers with a StateDirs() []string method name
// the directories no job may read.
func New(cfg Config, tiers []airlock.Tier, opts Options) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	policy, err := cfg.routerPolicy()
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg:         cfg,
		bigBodies:   make(chan struct{}, bigBodiesServer),
		listings:    make(chan struct{}, auditListingsServer),
		images:      opts.Images,
		approvals:   cfg.approvalPolicy(),
		now:         opts.Now,
		clockError:  opts.clockError,
		sessions:    map[string]*session{},
		pending:     map[approve.Digest]*pending{},
		pendingSeen: map[approve.Digest]time.Time{},
		opening:     map[string]bool{},
		console:     newConsole(),
		pools:       map[string]airlock.Pooler{},
		stopJan:     make(chan struct{}),
		janDone:     make(chan struct{}),
	}
	if s.now == nil {
		s.now = time.Now
	}
	var key []byte
	if cfg.Approvals != nil && cfg.Approvals.KeyFile != "" {
		if key, err = readKey("approvals.key_file", cfg.Approvals.KeyFile); err != nil {
			return nil, err
		}
	}
	if s.signer, err = approve.NewSigner(key); err != nil {
		return nil, err
	}
	serverLimits := cfg.TierLimits()
	s.tiers = slices.Clone(tiers)
	if err := s.openState(cfg); err != nil {
		return nil, err
	}
	fail := func(err error) (*Server, error) {
		if s.audit != nil && s.audit.shipper != nil {
			ctx, cancel := context.WithTimeout(context.Background(), closeStateTimeout)
			s.audit.shipper.close(ctx)
			cancel()
		}
		s.closeAudit()
		_ = s.store.Close()
		return nil, err
	}
	// No job may read what the server keeps for itself, whatever the roots.
	keep := []string{cfg.source, cfg.Policy}
	if cfg.Audit != "-" {
		keep = append(keep, cfg.Audit)
	}
	if cfg.Approvals != nil {
		keep = append(keep, cfg.Approvals.KeyFile)
	}
	var defImage string // no store: the tiers' host view, left unnamed
	if s.images != nil {
		keep = append(keep, s.images.Dir())
		if f := s.images.AuthFile(); f != "" {
			keep = append(keep, f)
		}
		defImage = s.images.Default()
	}
	for _, t := range s.tiers {
		if sd, ok := t.(interface{ StateDirs() []string }); ok {
			keep = append(keep, sd.StateDirs()...)
		}
	}
	tierNames := make([]string, len(s.tiers)) // shared by every tenant, never changed
	for i, tr := range s.tiers {
		tierNames[i] = tr.Name()
	}
	for i, t := range cfg.Tenants {
		mc := t.MaxConcurrent
		if mc == 0 {
			mc = 4
		}
		tn := &tenant{Tenant: t, limits: t.Limits.policy(serverLimits), slots: make(chan struct{}, mc), bigBodies: make(chan struct{}, bigBodiesTenant),
			listings: make(chan struct{}, auditListingsTenant)}
		tn.allowed, tn.defSit = t.situations()
		tn.tierNames = tierNames
		for _, name := range t.Tiers {
			if !slices.Contains(tierNames, name) {
				return fail(fmt.Errorf("tenants[%d].tiers: unknown tier %q (want one of %s)", i, name, strings.Join(tierNames, ", ")))
			}
		}
		tn.defImage = defImage
		if cfg.Images != nil {
			for _, r := range cfg.Images.Registries {
				reg, _ := registryOf(r) // validated with the configuration
				tn.pullFrom = append(tn.pullFrom, reg)
			}
		}
		if tn.roots, err = hostpath.NewRoots(t.ReadRoots, keep); err != nil {
			return fail(fmt.Errorf("tenants[%d].read_roots: %w", i, err))
		}
		switch {
		case t.RunsPerMinute > 0 && s.store.Shared():
			tn.lease = newLeased(s.store, t.Name, t.RunsPerMinute)
		case t.RunsPerMinute > 0:
			tn.rate = rate.NewLimiter(rate.Limit(float64(t.RunsPerMinute)/60), max(1, t.RunsPerMinute/10))
		}
		if s.store.Shared() {
			tn.share = newSlotShare(s, t.Name, mc)
		}
		s.tenants = append(s.tenants, tn)
		s.keys.add(t.KeySHA256, i)
	}
	w := opts.Audit
	var af *auditFile
	var ch chain
	switch {
	case w != nil:
	case cfg.Audit == "-":
		w = os.Stderr
	case cfg.Audit != "":
		if af, ch, err = openAuditFile(cfg.Audit, cfg.AuditRotation.settings(), cfg.AuditSync, s.now); err != nil {
			return fail(fmt.Errorf("audit file: %w", err))
		}
	}
	s.audit = newAuditor(w)
	if af != nil {
		s.audit.file, s.audit.chain = af, ch
	}
	s.audit.log = opts.Log
	s.audit.replica = s.replica
	if s.audit.log == nil {
		s.audit.log = os.Stderr
	}
	if s.store.Shared() {
		s.audit.shipper = newShipper(s.store, s.audit.log)
	}
	for _, t := range s.tiers {
		if p, ok := t.(airlock.Pooler); ok {
			s.pools[t.Name()] = p
		}
	}
	if s.router, err = escalate.New(policy, s.tiers); err != nil {
		return fail(fmt.Errorf("routing policy: %w", err))
	}
	if err := s.initWrapped(); err != nil {
		return fail(err)
	}
	s.base, s.cancel = context.WithCancel(context.WithValue(context.Background(), baseKey{}, s))
	s.metrics.started = time.Now()
	s.routes()
	go s.janitor()
	return s, nil
}

// baseKey marks the server's base context, which every run's context must
// descend from, so that closing the server cancels it.
type baseKey struct{}

// underBase reports whether ctx descends from the server's base context
// (requests served by [Server.Serve] do), so it is cancelled with it.
func (s *Server) underBase(ctx context.Context) bool {
	return ctx.Value(baseKey{}) == s
}

// Handler returns the API's HTTP handler.
func (s *Server) Handler() http.Handler { return s.handler }

// Router returns the router the server runs jobs through.
func (s *Server) Router() *escalate.Router { return s.router }

// Serve serves on ln until ctx is cancelled, then shuts down gracefully:
// it stops accepting, lets running jobs finish for the configured grace,
// cancels what is left, and closes every session and tier.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := httpguard.NewServer(s.handler)
	hs.BaseContext = func(net.Listener) context.Context { return s.base }
	hs.RegisterOnShutdown(s.console.endStreams) // event streams never go idle
	hs.RegisterOnShutdown(s.closeWrapped)       // nor do wrapped servers' sessions
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		s.Close()
		return err
	case <-ctx.Done():
	}
	return s.Shutdown(hs)
}

// Shutdown stops hs accepting, waits for running jobs up to the grace,
// then cancels them and closes everything.
func (s *Server) Shutdown(hs *http.Server) error {
	s.closing.Store(true)
	grace, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownGrace.or(10*time.Second))
	defer cancel()
	err := hs.Shutdown(grace)
	if errors.Is(err, context.DeadlineExceeded) {
		err = nil // the grace ran out: cancel what is left
	}
	s.cancel()
	// Cancelled runs stop promptly; give them a moment to answer their
	// clients (stopped: killed) before the connections are closed.
	drained := make(chan struct{})
	go func() { s.inflight.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(2 * time.Second):
	}
	idle, cancelIdle := context.WithTimeout(context.Background(), time.Second)
	_ = hs.Shutdown(idle) // let the answers out, then close the connections
	cancelIdle()
	_ = hs.Close()
	return errors.Join(err, s.Close())
}

// Close cancels every run, waits for them, and closes every session and
// tier. It is safe to call more than once.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.closing.Store(true)
	s.cancel()
	close(s.stopJan)
	<-s.janDone
	s.inflight.Wait()
	s.closeWrapped()
	s.mu.Lock()
	var errs []error
	closed := make([]string, 0, len(s.sessions))
	for id, ss := range s.sessions {
		errs = append(errs, ss.s.Close())
		delete(s.sessions, id)
		closed = append(closed, id)
	}
	s.mu.Unlock()
	// What is left to tell the shared state (sessions closed, leases and
	// slots given back, the replica gone, the records queued) has one
	// budget between them: with a slow database, one timeout each would
	// hold the shutdown for minutes. What is not told lapses with this
	// replica's lease.
	ctx, cancel := context.WithTimeout(context.Background(), closeStateTimeout)
	defer cancel()
	for _, id := range closed {
		s.unregister(ctx, id)
	}
	for _, t := range s.tenants {
		if t.lease != nil {
			t.lease.giveBack(ctx)
		}
		if t.share != nil {
			t.share.trim(ctx, time.Now(), 0)
		}
	}
	if s.store.Shared() {
		_ = s.store.Claim(ctx, s.replica, s.advertise, 0)
	}
	if s.audit.shipper != nil {
		s.audit.shipper.close(ctx)
	}
	errs = append(errs, s.store.Close())
	for _, t := range s.tiers {
		if c, ok := t.(io.Closer); ok {
			errs = append(errs, c.Close())
		}
	}
	errs = append(errs, s.closeAudit())
	return errors.Join(errs...)
}

func (s *Server) closeAudit() error {
	if s.audit == nil {
		return nil
	}
	return s.audit.close()
}
