// Package runstop lets a session's Close stop the run in progress at
// once, rather than wait for it, and every run that would begin after.
package runstop

import (
	"context"
	"errors"
	"sync"
)

// ErrClosed is the cause of a run stopped because its session was closed.
var ErrClosed = errors.New("the session was closed")

// Run is a session's run in progress, for Stop to end. The zero value is
// ready to use.
type Run struct {
	mu      sync.Mutex
	cancel  context.CancelCauseFunc // the run in progress, or nil
	stopped bool
}

// Begin returns the context of a run that Stop ends (with cause
// ErrClosed), and the function that ends the run's tenure, which the
// caller defers.
func (r *Run) Begin(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	r.mu.Lock()
	r.cancel = cancel
	if r.stopped { // a Stop that came before this run
		cancel(ErrClosed)
	}
	r.mu.Unlock()
	return ctx, func() {
		r.mu.Lock()
		r.cancel = nil
		r.mu.Unlock()
		cancel(nil)
	}
}

// Stop ends the run in progress, and every run that begins later, at
// once.
func (r *Run) Stop() {
	r.mu.Lock()
	r.stopped = true
	if r.cancel != nil {
		r.cancel(ErrClosed)
	}
	r.mu.Unlock()
}
