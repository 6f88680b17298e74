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
	"github.com/airlock-sandbox/airlock/internal/runstop"
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
	// progress is stopped (current) and the runs waiting their turn are
	// refused.
	closing atomic.Bool
	current runstop.Run // the run in progress
}

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
	ctx, end := s.current.Begin(ctx)
	defer end()
	return s.t.run(ctx, job, s)
}

// Close ends the session and drops its globals; a run in progress is
// stopped.
func (s *session) Close() error {
	s.closing.Store(true)
	s.current.Stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed, s.globals = true, nil
	return nil
}
