package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/approve"
	"github.com/airlock-sandbox/airlock/internal/state"
)

// ReplicaHeader names the replica that answered, on every answer.
const ReplicaHeader = "Airlock-Replica"

// forwardedHeader marks a request one replica forwarded to the owner of
// a session, so that it is never forwarded again (no loops).
const forwardedHeader = "Airlock-Forwarded-By"

// kindSessionLost is the refusal for a session whose replica died.
const kindSessionLost = "session_lost"

// stateStoreTimeout bounds every call to the shared store a request waits on.
const stateStoreTimeout = 5 * time.Second

// closeStateTimeout bounds all a closing server still tells the shared
// state, together.
const closeStateTimeout = 2 * stateStoreTimeout

// fromEnv resolves a setting of the form "env:NAME".
func fromEnv(setting, what string) (string, error) {
	name, ok := strings.CutPrefix(setting, "env:")
	if !ok {
		return setting, nil
	}
	v := os.Getenv(name)
	if v == "" {
		return "", fmt.Errorf("%s: the environment variable %s is empty", what, name)
	}
	return v, nil
}

// openState opens the configured store and names the replica.
func (s *Server) openState(cfg Config) error {
	setting, err := fromEnv(cfg.State, "state")
	if err != nil {
		return err
	}
	if s.advertise, err = fromEnv(cfg.Advertise, "advertise"); err != nil {
		return err
	}
	if s.advertise != "" {
		if u, err := url.Parse(s.advertise); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("advertise: want an http(s) base URL, not %q", s.advertise)
		}
	}
	s.replica = cfg.ReplicaID
	if s.replica == "" {
		s.replica, _ = os.Hostname()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if s.store, err = state.Open(ctx, setting); err != nil {
		return err
	}
	if s.store.Shared() && s.advertise == "" {
		_ = s.store.Close()
		return errors.New("advertise: a shared state needs the URL the other replicas reach this one at")
	}
	s.syncClock(ctx)
	// Two replicas under one id would take each other's run slots and
	// sessions for their own.
	if err := s.store.Claim(ctx, s.replica, s.advertise, s.sessionLease()); err != nil {
		_ = s.store.Close()
		if errors.Is(err, state.ErrReplicaInUse) {
			return fmt.Errorf("replica_id: %w; give each replica its own (the default is the host name)", err)
		}
		return err
	}
	return nil
}

// ownClock is this replica's clock.
func (s *Server) ownClock() time.Time { return time.Now().Add(s.clockError) }

// leaseNow is the time by the shared state's clock, which every replica
// times the leases of run slots and sessions by: a replica whose clock
// runs ahead would take the other replicas' holds for lapsed (and run
// more than the tenant's limit), one whose clock lags would renew leases
// the others take for lapsed.
func (s *Server) leaseNow() time.Time {
	return s.ownClock().Add(time.Duration(s.clockOffset.Load()))
}

// syncClock measures the shared state's clock against this replica's; a
// store that does not answer leaves the last measure.
func (s *Server) syncClock(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, stateStoreTimeout)
	defer cancel()
	before := s.ownClock()
	theirs, err := s.store.Now(ctx)
	if err != nil {
		return
	}
	after := s.ownClock()
	s.clockOffset.Store(int64(theirs.Sub(before.Add(after.Sub(before) / 2))))
}

func (s *Server) sessionLease() time.Duration { return s.cfg.SessionLease.or(30 * time.Second) }

// withReplica names the replica on every answer.
func (s *Server) withReplica(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(ReplicaHeader, s.replica)
		h.ServeHTTP(w, r)
	})
}

// redeem uses up an approval token: across every replica sharing the
// state, a token runs its job once.
func (s *Server) redeem(ctx context.Context, token string, c approve.Claims) error {
	ctx, cancel := context.WithTimeout(ctx, stateStoreTimeout)
	defer cancel()
	ok, err := s.store.Redeem(ctx, state.Redemption{Token: state.TokenHash(token), Digest: string(c.Digest),
		Tenant: c.Tenant, Expires: c.Expires, Replica: s.replica})
	if errors.Is(err, state.ErrExpired) {
		return &airlock.NotAdmitted{Reason: approve.Stale + ": the token expired at " + c.Expires.UTC().Format(time.RFC3339) + " by the shared state's clock"}
	}
	if err != nil {
		return s.stateUnavailable("the approval cannot be redeemed", err)
	}
	if !ok {
		return &airlock.NotAdmitted{Reason: approve.Stale + ": the token was already redeemed (a token runs its job once; ask for another approval)"}
	}
	return nil
}

// leased is a tenant's runs-per-minute budget shared by the replicas: a
// token bucket in the store (the rule the embedded state applies in
// memory), from which each replica leases a few runs at a time and spends
// them locally, so a run costs no round trip. Runs a replica leased and
// did not use are returned when it closes.
type leased struct {
	store  state.Store
	tenant string
	budget state.Budget
	batch  int
	retry  time.Duration // how long an empty bucket is not asked again

	mu    sync.Mutex
	left  int
	spent time.Time // when the store last had nothing left to lease
	down  lastFailure
}

// stateRetry is how long after a call to the shared state failed the
// calls that would wait behind it (one at a time, under a lock) fail at
// once with its error: while the database is slow, a tenant's requests
// are refused within about one call's timeout, not one timeout after
// another.
const stateRetry = time.Second

// lastFailure remembers a failed call to the shared state.
type lastFailure struct {
	at  time.Time
	err error
}

// recent returns the error of a call that failed less than stateRetry
// ago.
func (d *lastFailure) recent() error {
	if d.err != nil && time.Since(d.at) < stateRetry {
		return d.err
	}
	return nil
}

// set records the outcome of a call made for a caller whose context is
// caller: a caller that went away says nothing of the state.
func (d *lastFailure) set(caller context.Context, err error) {
	if err != nil && caller.Err() != nil {
		return
	}
	d.at, d.err = time.Now(), err
}

func newLeased(store state.Store, tenant string, perMinute int) *leased {
	b := state.BudgetOf(perMinute)
	// A quarter of the burst per lease (at most 100): few round trips, and
	// little held idle by one replica while another is refused.
	return &leased{store: store, tenant: tenant, budget: b, batch: max(1, min(b.Burst/4, 100)),
		retry: min(time.Second, max(10*time.Millisecond, time.Minute/time.Duration(perMinute)))}
}

// take spends one run, leasing another batch when this replica's is used up.
func (l *leased) take(ctx context.Context) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.left == 0 {
		// An empty bucket is asked again once a run has had time to
		// refill.
		now := time.Now()
		if !l.spent.IsZero() && now.Sub(l.spent) < l.retry {
			return false, nil
		}
		if err := l.down.recent(); err != nil {
			return false, err
		}
		caller := ctx
		ctx, cancel := context.WithTimeout(ctx, stateStoreTimeout)
		defer cancel()
		n, err := l.store.Lease(ctx, l.tenant, l.batch, l.budget)
		l.down.set(caller, err)
		if err != nil {
			return false, err
		}
		if l.left = n; n == 0 {
			l.spent = now
			return false, nil
		}
		l.spent = time.Time{}
	}
	l.left--
	return true, nil
}

// giveBack returns the unused part of the current lease.
func (l *leased) giveBack(ctx context.Context) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.left > 0 {
		ctx, cancel := context.WithTimeout(ctx, stateStoreTimeout)
		defer cancel()
		_ = l.store.Return(ctx, l.tenant, l.left, l.budget)
	}
	l.left = 0
}

// slotShare is this replica's share of a tenant's runs in flight on a
// shared state: it holds slots of the tenant's max_concurrent in the
// store, a batch at a time, runs on them without a round trip, and gives
// back what it holds beyond a batch of idle ones (all of them once idle
// for a while, or when it closes). Together the replicas never hold more
// than the limit; the holds of a replica that died lapse with its lease.
type slotShare struct {
	s      *Server
	tenant string
	limit  int
	batch  int

	mu       sync.Mutex
	held     int // slots this replica holds in the store
	busy     int // of which runs use
	lastBusy time.Time
	down     lastFailure
}

func newSlotShare(s *Server, tenant string, limit int) *slotShare {
	return &slotShare{s: s, tenant: tenant, limit: limit, batch: max(1, min(limit/8, 50))}
}

// hold sets the replica's hold to held plus up to want more; h.mu is held.
func (h *slotShare) hold(ctx context.Context, held, want int) (int, error) {
	if err := h.down.recent(); err != nil {
		return 0, err
	}
	caller := ctx
	ctx, cancel := context.WithTimeout(ctx, stateStoreTimeout)
	defer cancel()
	now := h.s.leaseNow()
	n, err := h.s.store.HoldSlots(ctx, state.Hold{Tenant: h.tenant, Replica: h.s.replica, Held: held, Want: want,
		Limit: h.limit, Now: now, Until: now.Add(h.s.sessionLease())})
	h.down.set(caller, err)
	if err == nil {
		h.held = held + n
	}
	return n, err
}

// take uses a held slot, holding another batch when none is free; false
// when every slot of the tenant is held.
func (h *slotShare) take(ctx context.Context) (bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.busy == h.held {
		if _, err := h.hold(ctx, h.held, h.batch); err != nil {
			return false, err
		}
	}
	if h.busy == h.held {
		return false, nil
	}
	h.busy++
	h.lastBusy = time.Now()
	return true, nil
}

// put frees a slot, giving back what is idle beyond a batch.
func (h *slotShare) put() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.busy--
	if h.held-h.busy > h.batch {
		// A failure leaves the slots held; trim retries.
		_, _ = h.hold(context.Background(), h.busy+h.batch, 0)
	}
}

// trim gives back every idle slot once none was used for idle.
func (h *slotShare) trim(ctx context.Context, now time.Time, idle time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held > h.busy && now.Sub(h.lastBusy) >= idle {
		_, _ = h.hold(ctx, h.busy, 0)
	}
}

// register records a session this replica is opening in the shared
// registry, before its sandbox starts: false when its tenant already has
// limit sessions open, on any replica.
func (s *Server) register(ctx context.Context, id string, t *tenant, tier string, limit int) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, stateStoreTimeout)
	defer cancel()
	now := s.leaseNow()
	return s.store.PutSession(ctx, state.Session{ID: id, Tenant: t.Name, Tier: tier,
		Replica: s.replica, Addr: s.advertise, Until: now.Add(s.sessionLease())}, limit, now)
}

// unregister forgets a session this replica closed.
func (s *Server) unregister(ctx context.Context, id string) {
	ctx, cancel := context.WithTimeout(ctx, stateStoreTimeout)
	defer cancel()
	_ = s.store.DropSession(ctx, id)
}

// renew extends this replica's claim on its sessions and run slots, by
// the shared state's clock, and sweeps what expired and the records no
// listing shows; the janitor calls it.
func (s *Server) renew() {
	s.syncClock(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), stateStoreTimeout)
	defer cancel()
	now := s.leaseNow()
	s.mu.Lock()
	held := make([]string, 0, len(s.sessions)+len(s.opening))
	for id := range s.sessions {
		held = append(held, id)
	}
	for id := range s.opening {
		held = append(held, id)
	}
	s.mu.Unlock()
	if err := s.store.Renew(ctx, s.replica, held, now.Add(s.sessionLease())); err != nil {
		fmt.Fprintf(s.audit.log, "airlock: renewing session leases: %v\n", err)
	}
	_ = s.store.Sweep(ctx, now)
	// Approval requests are listed for their TTL; they are kept twice as
	// long, for replicas whose clocks lag.
	_ = s.store.ForgetPending(ctx, s.now().Add(-2*s.approvalTTL()))
	// The shared records hold what GET /v1/audit lists, no more.
	for _, t := range s.tenants {
		if err := s.store.TrimRecords(ctx, t.Name, s.audit.keep); err != nil {
			break
		}
	}
}

// shareIdle is how long a replica keeps run slots no run uses before it
// gives them back to the other replicas (checked as often).
const shareIdle = 250 * time.Millisecond

// trimShares gives back the run slots idle for shareIdle.
func (s *Server) trimShares(now time.Time) {
	for _, t := range s.tenants {
		if t.share != nil {
			t.share.trim(context.Background(), now, shareIdle)
		}
	}
}

// elsewhere answers a request for a session this replica does not hold:
// forwarded to the replica that does, "session lost" when that replica's
// claim lapsed, else not found. It reports whether it answered.
func (s *Server) elsewhere(w http.ResponseWriter, r *http.Request, t *tenant, id string) bool {
	ctx, cancel := context.WithTimeout(r.Context(), stateStoreTimeout)
	row, ok, err := s.store.Session(ctx, id)
	cancel()
	switch {
	case err != nil:
		w.Header().Set("Retry-After", "5")
		s.refuse(w, http.StatusServiceUnavailable, kindOverloaded, s.stateUnavailable("session "+id+" cannot be looked up", err).Error())
		return true
	case !ok || row.Tenant != t.Name:
		return false
	case row.Replica == s.replica || s.leaseNow().After(row.Until):
		// Its sandbox died with its replica (or this replica restarted):
		// a new one would silently lose the session's state.
		s.refuse(w, http.StatusGone, kindSessionLost, fmt.Sprintf("session %s lost: replica %s that held it stopped (its lease lapsed at %s); open a new session",
			id, row.Replica, row.Until.UTC().Format(time.RFC3339)))
		return true
	case r.Header.Get(forwardedHeader) != "":
		return false
	}
	target, err := url.Parse(row.Addr)
	if err != nil {
		s.refuse(w, http.StatusBadGateway, kindOverloaded, "session "+id+": its replica's address is malformed")
		return true
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Header.Set(forwardedHeader, s.replica)
		},
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			w.Header().Set("Retry-After", "1")
			s.refuse(w, http.StatusServiceUnavailable, kindOverloaded, fmt.Sprintf(
				"session %s: its replica %s does not answer; the session is reported lost once its lease lapses", id, row.Replica))
		},
	}
	// The owner names itself on the answer.
	w.Header().Del(ReplicaHeader)
	proxy.ServeHTTP(w, r)
	return true
}

// warmPools fills every available tier's pool, in the background, and
// closes s.warmed when all are full (or their tier turned out unavailable:
// the router passes it over, so nothing waits for it).
func (s *Server) warmPools() {
	s.warmed = make(chan struct{})
	var wg sync.WaitGroup
	for name, p := range s.pools {
		if s.router.Unavailable(name) != nil {
			continue
		}
		wg.Go(func() { _ = p.WaitWarm(s.base) })
	}
	go func() { wg.Wait(); close(s.warmed) }()
}

// handleReady says whether this replica should be sent work: not
// draining, every pool warmed once, and the shared state answering.
func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	out := map[string]any{"ready": true, "replica": s.replica}
	status := http.StatusOK
	fail := func(k string, v any) {
		out["ready"], out[k] = false, v
		status = http.StatusServiceUnavailable
	}
	if s.closing.Load() {
		fail("shutting_down", true)
	}
	// Pools start on first use: the first probe starts them all. Once
	// warm, a pool emptied by load does not take the replica out of
	// service.
	s.warmOnce.Do(s.warmPools)
	select {
	case <-s.warmed:
	default:
		cold := []string{}
		for name, p := range s.pools {
			if st := p.PoolStats(); st.Ready < st.Size {
				cold = append(cold, name)
			}
		}
		fail("warming_pools", cold)
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	// Anyone may probe /readyz: the store's error (hosts, user and
	// database names) goes to the log, once per outage, not here.
	if err := s.store.Ping(ctx); err != nil {
		fail("state", "unreachable: the server's log says why")
		if !s.stateDown.Swap(true) {
			fmt.Fprintf(s.audit.log, "airlock: the shared state does not answer: %v\n", err)
		}
	} else if s.stateDown.Swap(false) {
		fmt.Fprintln(s.audit.log, "airlock: the shared state answers again")
	}
	writeJSON(w, status, out)
}

// stateUnavailable refuses a request the shared state did not serve: 503,
// saying what could not be done. The store's error names hosts, paths,
// users and databases: it goes to the server's log (at most once every
// few seconds), never to the client nor into the audit record of the
// refusal, which the tenant reads.
func (s *Server) stateUnavailable(what string, err error) error {
	now := time.Now().UnixNano()
	if last := s.stateLogged.Load(); now-last >= int64(5*time.Second) && s.stateLogged.CompareAndSwap(last, now) {
		fmt.Fprintf(s.audit.log, "airlock: %s: %v\n", what, err)
	}
	return unavailable(what + ": the shared state does not answer (the server's log says why); try again, or another replica")
}

// replicaUnavailable refuses a request for a cause of the replica's own
// (it drains, or cannot reach the shared state), not the tenant's quota:
// 503, for a client or load balancer to try another replica.
type replicaUnavailable struct{ msg string }

func (e *replicaUnavailable) Error() string { return e.msg }

func unavailable(msg string) error { return &replicaUnavailable{msg} }

// shipper copies audit records to the shared state in batches, off the
// runs' path, so that GET /v1/audit lists a tenant's runs from whichever
// replica answers. The trail file stays each replica's own record; a
// record the store cannot take is counted and logged, not retried.
//
// What waits to be shipped is bounded in bytes as well as in records: a
// record keeps its job (up to MaxAuditJob), and while the database is
// slow or down a tenant's large jobs must not pile up in memory.
type shipper struct {
	store state.Store
	log   io.Writer

	mu      sync.Mutex
	ch      chan shipped
	closed  bool
	ctx     context.Context // what bounds its batches: the shutdown's, once closed
	queued  atomic.Int64    // bytes of the records queued and batched
	dropped int             // records not queued since the last message
	told    time.Time       // when the last message about them was written
	done    chan struct{}
}

type shipped struct {
	r      Record
	weight int64
}

// shipBudget bounds the bytes of records waiting to be shipped.
var shipBudget int64 = 64 << 20

// maxShipBatch bounds the bytes of one batch sent to the store.
const maxShipBatch = 8 << 20

func newShipper(store state.Store, log io.Writer) *shipper {
	sh := &shipper{store: store, log: log, ch: make(chan shipped, 4096), done: make(chan struct{}), ctx: context.Background()}
	go sh.run()
	return sh
}

// weight is about what r takes while it waits, and once encoded.
func weight(r *Record) int64 {
	n := 1024 + len(r.Error) + len(r.Reason)
	if r.Job != nil {
		n += jobSize(r.Job)
	}
	return int64(n)
}

// ship queues r, dropping it (with a message, at most every 5 seconds)
// when the queue is full.
func (sh *shipper) ship(r Record) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.closed {
		return
	}
	w := weight(&r)
	if sh.queued.Load()+w <= shipBudget {
		select {
		case sh.ch <- shipped{r, w}:
			sh.queued.Add(w)
			return
		default:
		}
	}
	sh.dropped++
	if now := time.Now(); now.Sub(sh.told) >= 5*time.Second {
		fmt.Fprintf(sh.log, "airlock: the shared state's record queue is full; records kept in this replica's trail only: %d (the last of tenant %s)\n", sh.dropped, r.Tenant)
		sh.dropped, sh.told = 0, now
	}
}

func (sh *shipper) run() {
	defer close(sh.done)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var batch []state.Record
	var size, weights int64
	flush := func() {
		if len(batch) > 0 {
			sh.mu.Lock()
			base := sh.ctx
			sh.mu.Unlock()
			ctx, cancel := context.WithTimeout(base, stateStoreTimeout)
			if err := sh.store.AddRecords(ctx, batch); err != nil {
				fmt.Fprintf(sh.log, "airlock: %d audit records not shared: %v\n", len(batch), err)
			}
			cancel()
		}
		clear(batch)
		batch = batch[:0]
		sh.queued.Add(-weights)
		size, weights = 0, 0
	}
	for {
		select {
		case q, ok := <-sh.ch:
			if !ok {
				flush()
				return
			}
			weights += q.weight
			line, err := appendRecord(nil, &q.r)
			if err == nil {
				batch = append(batch, state.Record{Tenant: q.r.Tenant, Time: q.r.Time, Replica: q.r.Replica, JSON: line})
				size += int64(len(line))
			}
			if len(batch) >= 256 || size >= maxShipBatch {
				flush()
			}
		case <-tick.C:
			flush()
		}
	}
}

// close sends what is queued and stops. Once ctx is done, what is left
// is not sent (each replica's own trail keeps every record): a slow
// database cannot hold the shutdown a batch timeout at a time.
func (sh *shipper) close(ctx context.Context) {
	sh.mu.Lock()
	if !sh.closed {
		sh.closed = true
		sh.ctx = ctx
		close(sh.ch)
	}
	sh.mu.Unlock()
	<-sh.done
}

// sharedRecords lists a tenant's newest records from the shared state.
func (s *Server) sharedRecords(ctx context.Context, tenant string) ([]Record, error) {
	ctx, cancel := context.WithTimeout(ctx, stateStoreTimeout)
	defer cancel()
	lines, err := s.store.Records(ctx, tenant, s.audit.keep)
	if err != nil {
		return nil, err
	}
	out := make([]Record, 0, len(lines))
	for _, l := range lines {
		var r Record
		if err := json.Unmarshal(l, &r); err != nil {
			return nil, fmt.Errorf("state: a stored record: %w", err)
		}
		out = append(out, r)
	}
	return out, nil
}

// writeQueued exports the runs waiting for a slot, summed over tenants:
// the signal an autoscaler adds replicas on (deploy/kubernetes/hpa.yaml).
func (s *Server) writeQueued(w io.Writer) {
	var n int64
	for _, t := range s.tenants {
		n += t.waiting.Load()
	}
	fmt.Fprintln(w, "# HELP airlock_runs_queued Runs waiting for a slot of their tenant.")
	fmt.Fprintln(w, "# TYPE airlock_runs_queued gauge")
	fmt.Fprintf(w, "airlock_runs_queued %d\n", n)
}

// sharePending lets the approvers of every replica see an approval
// request made on this one.
func (s *Server) sharePending(ctx context.Context, d approve.Digest, p *pending) error {
	if !s.store.Shared() {
		return nil
	}
	job, err := json.Marshal(p.job)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, stateStoreTimeout)
	defer cancel()
	return s.store.PutPending(ctx, state.Pending{Digest: string(d), Tenant: p.tenant.Name, Tier: p.tier, Rule: p.rule, Job: job, Created: p.created})
}

// syncPending adds the approval requests other replicas took to this
// one's, before they are looked up or listed. A store that does not
// answer leaves this replica's own requests, and says so in the log.
// Only requests this replica has not seen cross from the store, and what
// it keeps of them stays within the bounds a request made here has: a
// tenant cannot make every lookup read its large jobs again, nor fill a
// replica with the requests it made on all the others.
func (s *Server) syncPending(ctx context.Context) {
	if !s.store.Shared() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, stateStoreTimeout)
	defer cancel()
	s.mu.Lock()
	// What it holds, as last asked: a job asked for again (after its
	// decision, say) is read again.
	held := make(map[string]time.Time, len(s.pending)+len(s.pendingSeen))
	for d, at := range s.pendingSeen {
		held[string(d)] = at
	}
	for d, p := range s.pending {
		held[string(d)] = p.created
	}
	s.mu.Unlock()
	since := s.now().Add(-s.approvalTTL())
	rows, err := s.store.Pending(ctx, since, func(d string, created time.Time) bool {
		at, ok := held[d]
		return ok && !created.After(at)
	})
	if err != nil {
		fmt.Fprintf(s.audit.log, "airlock: listing shared approval requests: %v\n", err)
		return
	}
	// Then the decisions, which take their jobs from the requests.
	defer s.syncDecided(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	type use struct{ n, bytes int }
	per := map[*tenant]*use{}
	all := 0
	for _, p := range s.pending {
		u := per[p.tenant]
		if u == nil {
			u = &use{}
			per[p.tenant] = u
		}
		u.n++
		u.bytes += p.size
		all += p.size
	}
	for _, row := range rows {
		d := approve.Digest(row.Digest)
		if p := s.pending[d]; p != nil {
			if row.Created.After(p.created) { // asked again, on another replica
				s.pending[d] = &pending{tenant: p.tenant, job: p.job, tier: p.tier, rule: p.rule, created: row.Created, image: p.image, size: p.size}
			}
			if _, seen := s.pendingSeen[d]; seen {
				s.pendingSeen[d] = row.Created
			}
			continue
		}
		// Not read again while it may be pending, whether kept or not.
		if len(s.pendingSeen) < 4*maxPending {
			s.pendingSeen[d] = row.Created
		}
		var t *tenant
		for _, tn := range s.tenants {
			if tn.Name == row.Tenant {
				t = tn
			}
		}
		var job airlock.Job
		if t == nil || json.Unmarshal(row.Job, &job) != nil {
			continue // a tenant this replica does not serve, or a newer job format
		}
		size := jobSize(&job)
		u := per[t]
		if u == nil {
			u = &use{}
			per[t] = u
		}
		if len(s.pending) >= maxPending || u.n >= maxPendingPerTenant || u.bytes+size > maxPendingBytesPerTenant || all+size > maxPendingBytes {
			continue
		}
		u.n++
		u.bytes += size
		all += size
		s.pending[d] = &pending{tenant: t, job: job, tier: row.Tier, rule: row.Rule, created: row.Created, size: size}
	}
}

// shared reports whether replicas share the state (false for a Server
// built without New, in internal tests).
func (s *Server) shared() bool { return s.store != nil && s.store.Shared() }
