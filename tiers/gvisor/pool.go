package gvisor

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock"
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
	return t.pool.stats()
}

// WaitWarm blocks until the warm pool holds its configured number of ready
// sandboxes, ctx ends, or the tier is closed. Without a pool (or when the
// tier is unavailable) it returns nil at once.
func (t *Tier) WaitWarm(ctx context.Context) error {
	if t.pool == nil {
		return nil
	}
	return t.pool.waitFull(ctx)
}

// pool keeps unused agent sandboxes ready. A claimed sandbox is never
// returned: after its job it is destroyed and the filler creates a fresh
// one in its place.
type pool struct {
	t      *Tier
	size   int
	refill int
	ttl    time.Duration
	ready  chan *sandbox
	kick   chan struct{}
	quit   chan struct{}
	done   chan struct{}

	mu      sync.Mutex
	st      Stats
	fillSum time.Duration
	added   chan struct{} // closed (and replaced) when a sandbox becomes ready
}

// failBackoff spaces out creations after a failure.
const failBackoff = time.Second

func newPool(t *Tier, size, refill int, ttl time.Duration) *pool {
	p := &pool{
		t: t, size: size, refill: refill, ttl: ttl,
		ready: make(chan *sandbox, size),
		kick:  make(chan struct{}, 1),
		quit:  make(chan struct{}),
		done:  make(chan struct{}),
		added: make(chan struct{}),
	}
	p.st.Size = size
	go p.fill()
	return p
}

func (p *pool) poke() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// fill keeps len(ready) + in-flight creations at size, with at most refill
// creations at a time.
func (p *pool) fill() {
	defer close(p.done)
	created := make(chan *sandbox)
	inflight := 0
	var expire <-chan time.Time
	if p.ttl > 0 {
		tick := time.NewTicker(p.ttl / 2)
		defer tick.Stop()
		expire = tick.C
	}
	for {
		for inflight < p.refill && len(p.ready)+inflight < p.size {
			inflight++
			go func() {
				start := time.Now()
				sb, err := p.t.newAgentSandbox(modeOnce, nil)
				p.mu.Lock()
				if err != nil {
					p.st.Failed++
					logf("filling the pool: %v", err)
				} else {
					p.st.Created++
					p.st.LastFill = time.Since(start)
					p.fillSum += p.st.LastFill
					p.st.MeanFill = p.fillSum / time.Duration(p.st.Created)
				}
				p.mu.Unlock()
				if err != nil {
					select {
					case <-time.After(failBackoff):
					case <-p.quit:
					}
				}
				created <- sb
			}()
		}
		select {
		case sb := <-created:
			inflight--
			if sb != nil {
				p.ready <- sb // never blocks: ready+inflight <= size
				p.mu.Lock()
				close(p.added)
				p.added = make(chan struct{})
				p.mu.Unlock()
			}
		case <-p.kick:
		case <-expire:
			p.expire()
		case <-p.quit:
			for ; inflight > 0; inflight-- {
				if sb := <-created; sb != nil {
					p.t.destroyLater(sb)
				}
			}
			for {
				select {
				case sb := <-p.ready:
					p.t.destroyLater(sb)
				default:
					return
				}
			}
		}
	}
}

// expire recycles ready sandboxes older than the TTL.
func (p *pool) expire() {
	for range len(p.ready) {
		select {
		case sb := <-p.ready:
			if time.Since(sb.created) > p.ttl {
				p.mu.Lock()
				p.st.Expired++
				p.mu.Unlock()
				p.t.destroyLater(sb)
				continue
			}
			p.ready <- sb
		default:
			return
		}
	}
}

// claim takes a ready sandbox, or returns nil (a miss) when none is ready.
func (p *pool) claim() *sandbox {
	select {
	case <-p.quit:
		return nil
	default:
	}
	var sb *sandbox
	select {
	case sb = <-p.ready:
	default:
	}
	p.mu.Lock()
	if sb != nil {
		p.st.Hits++
	} else {
		p.st.Misses++
	}
	p.mu.Unlock()
	if sb == nil {
		p.poke()
	} else {
		// The replacement is started once the claim's job is over (see
		// destroyLater), so that creating it does not compete with the
		// job for the CPU; a long job delays it by refillDelay at most.
		time.AfterFunc(refillDelay, p.poke)
	}
	return sb
}

// refillDelay bounds how long a claim's replacement waits for the job to
// end before it is started anyway.
const refillDelay = 500 * time.Millisecond

// errPoolClosed is returned by WaitWarm once the tier is closed.
var errPoolClosed = errors.New("gvisor: pool closed")

// waitFull blocks until the pool holds size ready sandboxes.
func (p *pool) waitFull(ctx context.Context) error {
	for {
		p.mu.Lock()
		full, added := len(p.ready) >= p.size, p.added
		p.mu.Unlock()
		if full {
			return nil
		}
		select {
		case <-added:
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-p.quit:
			return errPoolClosed
		}
	}
}

func (p *pool) stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.st
	s.Ready = len(p.ready)
	return s
}

func (p *pool) close() {
	select {
	case <-p.quit:
	default:
		close(p.quit)
	}
	<-p.done
}
