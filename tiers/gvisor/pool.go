package gvisor

import (
	"context"
	"errors"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/tiers/internal/warmpool"
)

// Stats describe the warm pool.
type Stats struct {
	Size     int    // configured number of ready sandboxes
	Ready    int    // sandboxes ready now
	Hits     uint64 // jobs that claimed a ready sandbox
	Misses   uint64 // jobs that found the pool empty and started cold
	Created  uint64 // sandboxes created for the pool
	Failed   uint64 // sandbox creations that failed
	Expired  uint64 // ready sandboxes recycled after the ready TTL
	LastFill time.Duration
	MeanFill time.Duration // mean time to create one pooled sandbox
}

// PoolStats returns the warm pool's counters in the root package's terms
// (airlock.Pooler).
func (t *Tier) PoolStats() airlock.PoolStats {
	st := t.Stats()
	return airlock.PoolStats{Size: st.Size, Ready: st.Ready, Hits: st.Hits, Misses: st.Misses}
}

// Stats returns the warm pool's counters (zero when there is no pool).
func (t *Tier) Stats() Stats {
	if t.pool == nil {
		return Stats{}
	}
	s := t.pool.Stats(poolKey{})
	return Stats{Size: s.Size, Ready: s.Ready, Hits: s.Hits, Misses: s.Misses,
		Created: s.Created, Failed: s.Failed, Expired: s.Expired, LastFill: s.LastFill, MeanFill: s.MeanFill}
}

// WaitWarm blocks until the warm pool holds its configured number of ready
// sandboxes, ctx ends, or the tier is closed. Without a pool (or when the
// tier is unavailable) it returns nil at once.
func (t *Tier) WaitWarm(ctx context.Context) error {
	if t.pool == nil {
		return nil
	}
	err := t.pool.WaitFull(ctx, poolKey{})
	if errors.Is(err, warmpool.ErrClosed) {
		return errPoolClosed
	}
	return err
}

// poolKey keys the warm pool: every pooled sandbox of a tier is created
// alike, so one key serves them all.
type poolKey struct{}

// newPool returns the warm pool of agent sandboxes. A claimed sandbox is
// never returned: after its job it is destroyed (destroyLater) and a fresh
// one created in its place, at most refill at a time.
func newPool(t *Tier, size, refill int, ttl time.Duration) *warmpool.Pool[poolKey, *sandbox] {
	p := warmpool.New(warmpool.Options[poolKey, *sandbox]{
		Start: func(context.Context, poolKey) (*sandbox, error) {
			sb, err := t.newAgentSandbox(modeOnce, nil)
			if err != nil {
				logf("filling the pool: %v", err)
			}
			return sb, err
		},
		Destroy:     t.destroyLater,
		Parallel:    refill,
		Backoff:     failBackoff,
		TTL:         ttl,
		RefillDelay: refillDelay,
	})
	p.SetSize(poolKey{}, size)
	return p
}

// failBackoff spaces out creations after a failure.
const failBackoff = time.Second

// refillDelay bounds how long a claim's replacement waits for the job to
// end before it is started anyway: creating it would compete with the job
// for the CPU.
const refillDelay = 500 * time.Millisecond

// errPoolClosed is returned by WaitWarm once the tier is closed.
var errPoolClosed = errors.New("gvisor: pool closed")
