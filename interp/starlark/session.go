package starlark

import (
	"context"
	"errors"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	sl "go.starlark.net/starlark"

	"github.com/airlock-sandbox/airlock"
)

var _ airlock.SessionTier = (*Tier)(nil)

// ErrSessionClosed is returned by a session's Run after Close or once its
// TTL has expired.
var ErrSessionClosed = errors.New("starlark session is closed")

// OpenSession opens a session whose globals survive between runs: each run
// is a chunk executed against the globals the earlier runs left (as in a
// REPL), on a fresh thread with the run's own limits, clock and seed.
// Runs of one session are serialised. A session needs no goroutine: an
// idle TTL is checked when the session is next used.
func (t *Tier) OpenSession(ctx context.Context, opts airlock.SessionOptions) (airlock.Session, error) {
	if opts.Workspace != "" {
		return nil, &airlock.NotAdmitted{Tier: Name, Reason: "persistent workspaces need a filesystem, which the starlark tier does not have"}
	}
	opts, err := opts.Resolve()
	if err != nil {
		return nil, err
	}
	return &session{t: t, id: opts.ID, ttl: opts.TTL, last: time.Now(), globals: maps.Clone(t.base)}, nil
}

type session struct {
	t   *Tier
	id  string
	ttl time.Duration

	mu      sync.Mutex
	last    time.Time
	closed  bool
	globals sl.StringDict

	// closing is set by Close before it waits for mu: the run in
	// progress is stopped (stop) and the runs waiting their turn are
	// refused.
	closing atomic.Bool
	stopMu  sync.Mutex
	stop    context.CancelCauseFunc // the run in progress, or nil
}

// errClosing is the cause of a run stopped because its session was
// closed.
var errClosing = errors.New("the session was closed")

func (s *session) ID() string { return s.id }

// Run runs a job in the session. The job's limits apply to this run only.
func (s *session) Run(ctx context.Context, job airlock.Job) (airlock.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed && s.ttl > 0 && time.Since(s.last) > s.ttl {
		s.closed, s.globals = true, nil
	}
	if s.closed || s.closing.Load() {
		res := airlock.Result{Tier: Name, Level: airlock.LevelInterpreter}
		err := &airlock.NotAdmitted{Tier: Name, Reason: ErrSessionClosed.Error() + " (" + s.id + ")"}
		res.SetError(err)
		return res, err
	}
	defer func() { s.last = time.Now() }()
	// Closing the session stops this run.
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	s.stopMu.Lock()
	s.stop = stop
	if s.closing.Load() { // a Close that came before stop was set
		stop(errClosing)
	}
	s.stopMu.Unlock()
	defer func() {
		s.stopMu.Lock()
		s.stop = nil
		s.stopMu.Unlock()
	}()
	return s.t.run(ctx, job, s)
}

// Close ends the session and drops its globals; a run in progress is
// stopped.
func (s *session) Close() error {
	s.closing.Store(true)
	s.stopMu.Lock()
	if s.stop != nil {
		s.stop(errClosing)
	}
	s.stopMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed, s.globals = true, nil
	return nil
}
