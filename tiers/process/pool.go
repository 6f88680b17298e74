package process

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/tiers/internal/warmpool"
)

// poolKey keys the tier's warm pools: every pooled container (or worker)
// of a tier starts alike, so one key serves them all.
type poolKey struct{}

// poolLimits are the limits a pooled container starts with; the claiming
// job's replace them.
var poolLimits = airlock.DefaultLimitPolicy().Default

// newPool returns a pool of size instances that a claim takes and Release
// destroys: a used instance never returns. A failed start is tried again
// on the next claim or wait, which reports it.
func newPool[T any](size int, start func(context.Context) (T, error), alive func(T) bool, destroy func(T), afterEnd func(T, func())) *warmpool.Pool[poolKey, T] {
	p := warmpool.New(warmpool.Options[poolKey, T]{
		Start:        func(ctx context.Context, _ poolKey) (T, error) { return start(ctx) },
		Alive:        alive,
		Destroy:      destroy,
		AfterEnd:     afterEnd,
		StartTimeout: poolStartTimeout,
		WaitErr:      true,
		Newest:       true,
	})
	p.SetSize(poolKey{}, size)
	return p
}

// poolStartTimeout bounds one pooled start.
const poolStartTimeout = 30 * time.Second

// waitPool waits for p to be full (see warmpool.Pool.WaitFull).
func waitPool[T any](ctx context.Context, p *warmpool.Pool[poolKey, T]) error {
	err := p.WaitFull(ctx, poolKey{})
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
