package microvm

import (
	"context"
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/airlock-sandbox/airlock/tiers/internal/warmpool"
)

// The pool keeps VMs booted (or, under KVM with snapshots, restored) and
// waiting for one job each, keyed by their guest memory (every pooled VM
// has the base memory, see baseMem) and the reference of their image: the
// default image's (WithPool) and those of WithImagePool, acquired as each
// VM starts (with no resolver, or a host-view default, the host view). A
// claim takes one only for a job of that same image digest, so a job of
// an image without a pool starts its VM itself. A claimed VM runs exactly one job and
// is destroyed after it; it is never returned. Nothing of a job's policy
// is in a pooled VM: the job's limits, secrets, clock and entropy reach
// the agent with the job, at claim time.
//
// A VM is booted once the jobs of claimed VMs have finished (or after
// refillDelay): booting would otherwise compete for the CPU with the very
// job the pool is there to speed up.
func newPool(t *Tier) *warmpool.Pool[poolKey, *vm] {
	t.digests, t.names = map[string]string{}, map[string]string{}
	p := warmpool.New(warmpool.Options[poolKey, *vm]{
		Start: func(ctx context.Context, k poolKey) (*vm, error) {
			mem := k.mem
			h, err := t.poolImage(ctx, k.ref)
			if err != nil {
				return nil, err
			}
			t.poolMu.Lock()
			t.digests[k.ref] = digestOf(h)
			if h != nil {
				t.names[k.ref] = h.img.Ref
			}
			t.poolMu.Unlock()
			if h != nil {
				defer h.unref() // the VM holds its own
			}
			var v *vm
			if t.cfg.warm == WarmSnapshot && t.kvm {
				v, err = t.restore(ctx, mem, h)
			} else {
				// Under emulation a pooled VM is booted, not restored, and its
				// agent runs a throwaway /bin/true before Ready: QEMU then has
				// the path a job takes (the agent's and shim's code, exec,
				// faults, exit) translated, which a restored VM must translate
				// afresh during its job — measured, several times the job's
				// own time in the guest (docs/microvm.md).
				v, err = t.bootWith(ctx, vmSpec{memMB: mem, vcpus: t.cfg.vcpus, warmup: true, img: h})
			}
			if err != nil && v != nil {
				v.kill()
			}
			if v != nil {
				v.pkey = k
			}
			return v, err
		},
		Alive:       func(v *vm) bool { return !exited(v.done) },
		Destroy:     (*vm).kill,
		Backoff:     time.Second, // the tier falls back to unpooled starts meanwhile
		RefillDelay: refillDelay,
	})
	for _, ref := range t.pooledRefs() {
		p.SetSize(poolKey{t.baseMem(), ref}, t.sizeOf(ref))
	}
	return p
}

// poolKey keys the pool: pooled VMs have the base memory and the image
// ref names ("": the default).
type poolKey struct {
	mem int64
	ref string
}

// poolImage holds the image a pooled VM of ref starts with.
func (t *Tier) poolImage(ctx context.Context, ref string) (*heldImage, error) {
	if ref == "" {
		return t.defaultImage(ctx)
	}
	h, _, err := t.imageFor(ctx, ref)
	return h, err
}

// pooledRefs returns the references whose images are kept ready, the
// default's ("") first when it is.
func (t *Tier) pooledRefs() []string {
	var refs []string
	if t.cfg.pool > 0 {
		refs = append(refs, "")
	}
	return append(refs, slices.Sorted(maps.Keys(t.cfg.imgPools))...)
}

// sizeOf is the configured pool size of ref's image.
func (t *Tier) sizeOf(ref string) int {
	if ref == "" {
		return t.cfg.pool
	}
	return t.cfg.imgPools[ref]
}

// poolKeys returns the pool's keys.
func (t *Tier) poolKeys() []poolKey {
	var ks []poolKey
	for _, ref := range t.pooledRefs() {
		ks = append(ks, poolKey{t.baseMem(), ref})
	}
	return ks
}

// poolDigest returns the digest of ref's image as its last VM started.
func (t *Tier) poolDigest(ref string) (string, bool) {
	t.poolMu.Lock()
	defer t.poolMu.Unlock()
	d, ok := t.digests[ref]
	return d, ok
}

// follow is told the digest a job's reference ref resolved to: when ref
// has a pool whose VMs are of another image (the name has moved), they
// are ended and the pool refilled with VMs of the new one. A claim never
// takes a VM of another digest in any case; this keeps the pool useful.
func (t *Tier) follow(ref, digest string) {
	if t.pool == nil || t.sizeOf(ref) == 0 {
		return
	}
	t.poolMu.Lock()
	d, ok := t.digests[ref]
	if !ok || d == digest {
		t.poolMu.Unlock()
		return
	}
	t.digests[ref] = digest
	t.poolMu.Unlock()
	k := poolKey{t.baseMem(), ref}
	t.pool.SetSize(k, 0)
	t.pool.SetSize(k, t.sizeOf(ref))
}

// refillDelay bounds how long a refill waits for claimed jobs to finish.
const refillDelay = time.Second

// claim takes a waiting VM big enough for mem whose root is the image of
// digest ("": the host view), or returns nil at once.
// Only the pools whose image is that digest are asked: a claim on another
// would count a miss against a pool the job could never use.
func (t *Tier) claim(mem int64, digest string) *vm {
	base := t.baseMem()
	for _, k := range t.poolKeys() {
		if d, ok := t.poolDigest(k.ref); !ok || d != digest {
			continue
		}
		v, ok := t.pool.Claim(k, func(v *vm) bool { return mem <= base && digestOf(v.img) == digest })
		if ok {
			v.claimed = true
			return v
		}
	}
	return nil
}

// waitPool blocks until every slot of the pool holds a VM waiting for its
// job, or ctx ends. (A VM that dies while waiting still fills its slot
// until a claim drops it; under emulation that is rare.)
func (t *Tier) waitPool(ctx context.Context) error {
	var err error
	for _, k := range t.poolKeys() {
		if err = t.pool.WaitFull(ctx, k); err != nil {
			break
		}
	}
	switch {
	case errors.Is(err, warmpool.ErrClosed):
		return errors.New("microvm: the pool is closed")
	case err != nil && ctx.Err() != nil:
		return ctx.Err()
	}
	return err
}

func exited(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// appendName adds the name ref's pool was configured by (the default's
// by the name its image resolved from) to names once, keeping them
// sorted.
func (t *Tier) appendName(names []string, ref string) []string {
	t.poolMu.Lock()
	n := t.names[ref]
	t.poolMu.Unlock()
	if n == "" {
		n = ref
	}
	if n == "" || slices.Contains(names, n) {
		return names
	}
	names = append(names, n)
	slices.Sort(names)
	return names
}
