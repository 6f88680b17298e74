package gvisor

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/tiers/internal/warmpool"
)

// Stats describe the warm pool: the totals of its images' pools.
type Stats struct {
	Size     int           // configured number of ready sandboxes
	Ready    int           // sandboxes ready now
	Hits     uint64        // jobs that claimed a ready sandbox
	Misses   uint64        // jobs that found the pool empty and started cold
	Created  uint64        // sandboxes created for the pool
	Failed   uint64        // sandbox creations that failed
	Expired  uint64        // ready sandboxes recycled after the ready TTL
	LastFill time.Duration // the default image's
	MeanFill time.Duration // mean time to create one pooled sandbox
}

// PoolStats returns the warm pool's counters in the root package's terms
// (airlock.Pooler): the totals, and per image digest ("host" for the host
// view without a resolver) those of each configured image's pool, with
// the names that configured it.
func (t *Tier) PoolStats() airlock.PoolStats {
	if t.pool == nil {
		return airlock.PoolStats{}
	}
	var tot airlock.PoolStats
	tot.Images = map[string]airlock.PoolStats{}
	for _, k := range t.poolKeys() {
		st := t.pool.Stats(k).PoolStats()
		st.Names = t.namesOf(k)
		name := k.digest
		if name == "" {
			name = image.Host
		}
		tot.Images[name] = st
		warmpool.Add(&tot, st)
	}
	return tot
}

// Stats returns the warm pool's counters (zero when there is no pool).
func (t *Tier) Stats() Stats {
	if t.pool == nil {
		return Stats{}
	}
	var tot Stats
	var fill time.Duration
	def := t.defaultKey()
	for _, k := range t.poolKeys() {
		s := t.pool.Stats(k)
		tot.Size += s.Size
		tot.Ready += s.Ready
		tot.Hits += s.Hits
		tot.Misses += s.Misses
		tot.Created += s.Created
		tot.Failed += s.Failed
		tot.Expired += s.Expired
		fill += s.MeanFill * time.Duration(s.Created)
		if k == def {
			tot.LastFill = s.LastFill
		}
	}
	if tot.Created > 0 {
		tot.MeanFill = fill / time.Duration(tot.Created)
	}
	return tot
}

// WaitWarm blocks until each configured image's pool holds its number of
// ready sandboxes, ctx ends, or the tier is closed. Without a pool (or
// when the tier is unavailable) it returns nil at once.
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
	for _, k := range t.poolKeys() {
		err := t.pool.WaitFull(ctx, k)
		if errors.Is(err, warmpool.ErrClosed) {
			return errPoolClosed
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// poolKey keys the warm pool by the digest of the sandboxes' image ("" for
// the host view without a resolver): a job is only ever handed a sandbox
// whose root is its own image.
type poolKey struct{ digest string }

// newPool returns the warm pool of agent sandboxes. A claimed sandbox is
// never returned: after its job it is destroyed (destroyLater) and a fresh
// one created in its place, at most refill at a time per image. Only the
// configured images are kept ready: without a resolver, the host view;
// with one, the image Acquire("") names and those of Config.WithImagePool,
// found in the background (see prewarm).
func newPool(t *Tier, size, refill int, ttl time.Duration) *warmpool.Pool[poolKey, *sandbox] {
	t.defSet = make(chan struct{})
	t.poolRefs, t.refKeys, t.refNames = map[poolKey]string{}, map[string]poolKey{}, map[string]string{}
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
		t.poolRefs[poolKey{}], t.refKeys[""] = "", poolKey{}
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
		t.follow(ref, img) // the pool moves with the name
		return nil, fmt.Errorf("image %q is now %s, not %s", ref, got, k.digest)
	}
	return t.newAgentSandbox(modeOnce, airlock.FSGrant{}, img, release)
}

// pooledRefs returns the references whose images are kept ready, the
// default's ("") first when it is.
func (t *Tier) pooledRefs() []string {
	var refs []string
	if t.cfg.pool > 0 {
		refs = append(refs, "")
	}
	for _, r := range slices.Sorted(maps.Keys(t.cfg.imgPools)) {
		refs = append(refs, r)
	}
	return refs
}

// sizeOf is the configured pool size of ref's image.
func (t *Tier) sizeOf(ref string) int {
	if ref == "" {
		return t.cfg.pool
	}
	return t.cfg.imgPools[ref]
}

// prewarm finds the configured images and keeps their sandboxes ready. It
// runs in the background from New: resolving may pull and unpack. An
// image that cannot be found is reported by WaitWarm; the others are
// still kept ready.
func (t *Tier) prewarm(ctx context.Context) {
	defer close(t.defSet)
	var errs []error
	for _, ref := range t.pooledRefs() {
		img, release, err := t.acquire(ctx, ref)
		if err != nil {
			errs = append(errs, fmt.Errorf("gvisor: prewarming image %q: %w", ref, err))
			logf("%v", errs[len(errs)-1])
			continue
		}
		release() // each pooled sandbox holds the image itself
		t.follow(ref, img)
	}
	t.defErr = errors.Join(errs...)
}

// follow makes img (nil: the host view) the image of ref's pool: its
// sandboxes are kept ready, those of the image ref named before no longer
// (unless another reference still names it). A reference without a
// configured pool is ignored.
func (t *Tier) follow(ref string, img *image.Image) {
	if t.sizeOf(ref) == 0 {
		return
	}
	t.pmu.Lock()
	defer t.pmu.Unlock()
	if img != nil {
		t.refNames[ref] = img.Ref
	}
	k := poolKey{digest(img)}
	old, set := t.refKeys[ref]
	if set && old == k {
		return
	}
	t.refKeys[ref] = k
	if ref == "" {
		t.defKey = k
	}
	if set {
		t.resize(old)
	}
	t.resize(k)
}

// resize gives k the largest size of the references that name its image
// now (0 when none does); t.pmu is held.
func (t *Tier) resize(k poolKey) {
	n := 0
	for r, rk := range t.refKeys {
		if rk == k && t.sizeOf(r) > n {
			n = t.sizeOf(r)
			t.poolRefs[k] = r
		}
	}
	t.pool.SetSize(k, n)
}

// poolKeys returns the keys of the configured images' pools.
func (t *Tier) poolKeys() []poolKey {
	t.pmu.Lock()
	defer t.pmu.Unlock()
	var ks []poolKey
	for _, k := range t.refKeys {
		if !slices.Contains(ks, k) {
			ks = append(ks, k)
		}
	}
	slices.SortFunc(ks, func(a, b poolKey) int { return strings.Compare(a.digest, b.digest) })
	return ks
}

// namesOf returns the names configuring k's pool, sorted: the references
// naming its image, the default by the name it resolved from.
func (t *Tier) namesOf(k poolKey) []string {
	t.pmu.Lock()
	defer t.pmu.Unlock()
	var names []string
	for r, rk := range t.refKeys {
		n := t.refNames[r]
		if n == "" {
			n = r
		}
		if rk == k && n != "" && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}

// defaultKey is the key of the default image's pool.
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
