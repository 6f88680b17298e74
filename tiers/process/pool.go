package process

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/tiers/internal/warmpool"
)

// poolKey keys the tier's warm pools: pooled containers of one image
// start alike (a guarded tier's workers all do: the zero key), and a
// container of one image is never handed to a job of another.
type poolKey struct {
	// digest is the image's (image.Host for the host view with a
	// resolver; "" without one).
	digest string
}

// poolLimits are the limits a pooled container starts with; the claiming
// job's replace them.
var poolLimits = airlock.DefaultLimitPolicy().Default

// newPool returns a pool that keeps size instances of key (none: the
// caller sets a key's size later) that a claim takes and Release
// destroys: a used instance never returns. A failed start is tried again
// on the next claim or wait, which reports it.
func newPool[T any](key poolKey, size int, start func(context.Context, poolKey) (T, error), alive func(T) bool, destroy func(T), afterEnd func(T, func())) *warmpool.Pool[poolKey, T] {
	p := warmpool.New(warmpool.Options[poolKey, T]{
		Start:        start,
		Alive:        alive,
		Destroy:      destroy,
		AfterEnd:     afterEnd,
		StartTimeout: poolStartTimeout,
		WaitErr:      true,
		Newest:       true,
	})
	if size > 0 {
		p.SetSize(key, size)
	}
	return p
}

// poolStartTimeout bounds one pooled start.
const poolStartTimeout = 30 * time.Second

// waitPool waits for p's key to be full (see warmpool.Pool.WaitFull).
func waitPool[T any](ctx context.Context, p *warmpool.Pool[poolKey, T], key poolKey) error {
	err := p.WaitFull(ctx, key)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil && err == context.Cause(ctx):
		return ctx.Err()
	case errors.Is(err, warmpool.ErrClosed):
		return errors.New("warming pool: closed")
	}
	return fmt.Errorf("warming pool: %w", err)
}

// exitedCh reports whether a channel closed on exit is closed.
func exitedCh(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
