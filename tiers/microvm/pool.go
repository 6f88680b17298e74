package microvm

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock"
)

// pool keeps VMs booted (or, under KVM with snapshots, restored) and
// waiting for one job each. A
// claimed VM runs exactly one job and is destroyed after it; it is never
// returned. Nothing of a job's policy is in a pooled VM: the job's limits,
// secrets, clock and entropy reach the agent with the job, at claim time.
type pool struct {
	t        *Tier
	mem      int64
	ready    chan *vm
	inFlight atomic.Int64  // claimed VMs whose job still runs
	hits     atomic.Uint64 // claims that took a waiting VM
	misses   atomic.Uint64 // claims that found none (the job started unpooled)
	released chan struct{} // a claimed VM's job has finished
	claimed  chan struct{} // a slot has been emptied
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

func newPool(t *Tier, n int) *pool {
	ctx, cancel := context.WithCancel(context.Background())
	p := &pool{t: t, mem: t.baseMem(), ready: make(chan *vm, n), released: make(chan struct{}, 1), claimed: make(chan struct{}, 1), ctx: ctx, cancel: cancel}
	p.wg.Add(1)
	go p.fill()
	return p
}

// refillDelay bounds how long a refill waits for claimed jobs to finish.
const refillDelay = time.Second

// fill keeps the pool full until it is closed. A VM is booted only for an
// empty slot (one booted ahead would wait outside the pool, and the boot
// of its successor would start at the very claim that let it in), and
// once the jobs of claimed VMs have finished (or after refillDelay):
// booting would otherwise compete for the CPU with the very job the pool
// is there to speed up.
func (p *pool) fill() {
	defer p.wg.Done()
	for p.ctx.Err() == nil {
		if len(p.ready) == cap(p.ready) {
			select {
			case <-p.claimed:
			case <-p.ctx.Done():
				return
			}
			continue
		}
		if p.inFlight.Load() > 0 {
			select {
			case <-p.released:
			case <-time.After(refillDelay):
			case <-p.ctx.Done():
				return
			}
		}
		var v *vm
		var err error
		if p.t.cfg.warm == WarmSnapshot && p.t.kvm {
			v, err = p.t.restore(p.ctx, p.mem)
		} else {
			// Under emulation a pooled VM is booted, not restored, and its
			// agent runs a throwaway /bin/true before Ready: QEMU then has
			// the path a job takes (the agent's and shim's code, exec,
			// faults, exit) translated, which a restored VM must translate
			// afresh during its job — measured, several times the job's
			// own time in the guest (docs/microvm.md).
			v, err = p.t.bootWith(p.ctx, vmSpec{memMB: p.mem, vcpus: p.t.cfg.vcpus, warmup: true})
		}
		if err != nil {
			if v != nil {
				v.kill()
			}
			select { // back off; the tier falls back to unpooled starts
			case <-p.ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		select {
		case p.ready <- v:
		case <-p.ctx.Done():
			v.kill()
		}
	}
}

// claim takes a waiting VM big enough for mem, or returns nil at once.
func (p *pool) claim(mem int64) *vm {
	if mem > p.mem {
		p.misses.Add(1)
		return nil
	}
	for {
		select {
		case v := <-p.ready:
			select {
			case <-v.done: // died while waiting: drop it
				v.kill()
				p.emptied()
				continue
			default:
			}
			p.emptied()
			v.pool = p
			p.inFlight.Add(1)
			p.hits.Add(1)
			return v
		default:
			p.misses.Add(1)
			return nil
		}
	}
}

// emptied tells fill that a slot is free.
func (p *pool) emptied() {
	select {
	case p.claimed <- struct{}{}:
	default:
	}
}

// stats returns the pool's counters.
func (p *pool) stats() airlock.PoolStats {
	return airlock.PoolStats{Size: cap(p.ready), Ready: len(p.ready), Hits: p.hits.Load(), Misses: p.misses.Load()}
}

// release records that a claimed VM's job has finished.
func (p *pool) release() {
	p.inFlight.Add(-1)
	select {
	case p.released <- struct{}{}:
	default:
	}
}

// waitFull blocks until every slot of the pool holds a VM waiting for its
// job, or ctx ends. (A VM that dies while waiting still fills its slot
// until a claim drops it; under emulation that is rare.)
func (p *pool) waitFull(ctx context.Context) error {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for len(p.ready) < cap(p.ready) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-p.ctx.Done():
			return errors.New("microvm: the pool is closed")
		case <-tick.C:
		}
	}
	return nil
}

// close stops refilling and destroys the waiting VMs.
func (p *pool) close() {
	p.cancel()
	p.wg.Wait()
	for {
		select {
		case v := <-p.ready:
			v.kill()
		default:
			return
		}
	}
}
