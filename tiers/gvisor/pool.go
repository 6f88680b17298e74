package gvisor

import (
	"context"
	"errors"
	"fmt"
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
	s := t.pool.Stats(t.defaultKey())
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
	select {
	case <-t.defSet:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	if t.defErr != nil {
		return t.defErr
	}
	err := t.pool.WaitFull(ctx, t.defaultKey())
	if errors.Is(err, warmpool.ErrClosed) {
		return errPoolClosed
	}
	return err
}

// poolKey keys the warm pool by the digest of the sandboxes' image ("" for
// the host view without a resolver): a job is only ever handed a sandbox
// whose root is its own image.
type poolKey struct{ digest string }

// newPool returns the warm pool of agent sandboxes. A claimed sandbox is
// never returned: after its job it is destroyed (destroyLater) and a fresh
// one created in its place, at most refill at a time. Only the default
// image is kept ready: without a resolver, the host view; with one, the
// image Acquire("") names, found in the background (see prewarmDefault).
func newPool(t *Tier, size, refill int, ttl time.Duration) *warmpool.Pool[poolKey, *sandbox] {
	t.defSet = make(chan struct{})
	p := warmpool.New(warmpool.Options[poolKey, *sandbox]{
		Start: func(ctx context.Context, k poolKey) (*sandbox, error) {
			sb, err := t.startPooled(ctx, k)
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
	if t.cfg.images == nil {
		t.poolRefs = map[poolKey]string{{}: ""}
		close(t.defSet)
		p.SetSize(poolKey{}, size)
	}
	return p
}

// startPooled creates a pooled sandbox for key k, holding the image k's
// reference names (which must still be k's digest).
func (t *Tier) startPooled(ctx context.Context, k poolKey) (*sandbox, error) {
	t.pmu.Lock()
	ref, ok := t.poolRefs[k]
	t.pmu.Unlock()
	if !ok {
		return nil, fmt.Errorf("no image for pool key %q", k.digest)
	}
	img, release, err := t.acquire(ctx, ref)
	if err != nil {
		return nil, err
	}
	if got := digest(img); got != k.digest {
		release()
		return nil, fmt.Errorf("image %q is now %s, not %s", ref, got, k.digest)
	}
	return t.newAgentSandbox(modeOnce, airlock.FSGrant{}, img, release)
}

// prewarmDefault finds the default image and keeps size sandboxes of it
// ready. It runs in the background from New: resolving may pull and unpack.
func (t *Tier) prewarmDefault(ctx context.Context) {
	defer close(t.defSet)
	img, release, err := t.acquire(ctx, "")
	if err != nil {
		t.defErr = fmt.Errorf("gvisor: prewarming the default image: %w", err)
		logf("%v", t.defErr)
		return
	}
	release() // each pooled sandbox holds the image itself
	t.followDefault(digest(img))
}

// followDefault makes d the digest of the default image's pool: its
// sandboxes are kept ready, those of a previous default no longer.
func (t *Tier) followDefault(d string) {
	t.pmu.Lock()
	old, set := t.defKey, t.poolRefs != nil
	if set && old.digest == d {
		t.pmu.Unlock()
		return
	}
	if t.poolRefs == nil {
		t.poolRefs = map[poolKey]string{}
	}
	t.defKey = poolKey{d}
	t.poolRefs[t.defKey] = ""
	t.pmu.Unlock()
	if set {
		t.pool.SetSize(old, 0)
	}
	t.pool.SetSize(poolKey{d}, t.cfg.pool)
}

// defaultKey is the key of the prewarmed pool.
func (t *Tier) defaultKey() poolKey {
	t.pmu.Lock()
	defer t.pmu.Unlock()
	return t.defKey
}

// failBackoff spaces out creations after a failure.
const failBackoff = time.Second

// refillDelay bounds how long a claim's replacement waits for the job to
// end before it is started anyway: creating it would compete with the job
// for the CPU.
const refillDelay = 500 * time.Millisecond

// errPoolClosed is returned by WaitWarm once the tier is closed.
var errPoolClosed = errors.New("gvisor: pool closed")
