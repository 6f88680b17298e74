package microvm

import (
	"context"
	"errors"
	"time"

	"github.com/airlock-sandbox/airlock/tiers/internal/warmpool"
)

// The pool keeps VMs booted (or, under KVM with snapshots, restored) and
// waiting for one job each, keyed by their guest memory (every pooled VM
// has the base memory, see baseMem). Pooled VMs are of the default image
// (acquired as each starts; with no resolver, or a host-view default, the
// host view); a claim takes one only for a job of that same image digest,
// so a job of another image starts its VM itself. A claimed VM runs exactly one job and
// is destroyed after it; it is never returned. Nothing of a job's policy
// is in a pooled VM: the job's limits, secrets, clock and entropy reach
// the agent with the job, at claim time.
//
// A VM is booted once the jobs of claimed VMs have finished (or after
// refillDelay): booting would otherwise compete for the CPU with the very
// job the pool is there to speed up.
func newPool(t *Tier, n int) *warmpool.Pool[int64, *vm] {
	p := warmpool.New(warmpool.Options[int64, *vm]{
		Start: func(ctx context.Context, mem int64) (*vm, error) {
			h, err := t.defaultImage(ctx)
			if err != nil {
				return nil, err
			}
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
			return v, err
		},
		Alive:       func(v *vm) bool { return !exited(v.done) },
		Destroy:     (*vm).kill,
		Backoff:     time.Second, // the tier falls back to unpooled starts meanwhile
		RefillDelay: refillDelay,
	})
	p.SetSize(t.baseMem(), n)
	return p
}

// refillDelay bounds how long a refill waits for claimed jobs to finish.
const refillDelay = time.Second

// claim takes a waiting VM big enough for mem whose root is the image of
// digest ("": the host view), or returns nil at once.
func (t *Tier) claim(mem int64, digest string) *vm {
	base := t.baseMem()
	v, ok := t.pool.Claim(base, func(v *vm) bool { return mem <= base && digestOf(v.img) == digest })
	if !ok {
		return nil
	}
	v.claimed = true
	return v
}

// waitPool blocks until every slot of the pool holds a VM waiting for its
// job, or ctx ends. (A VM that dies while waiting still fills its slot
// until a claim drops it; under emulation that is rare.)
func (t *Tier) waitPool(ctx context.Context) error {
	err := t.pool.WaitFull(ctx, t.baseMem())
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
