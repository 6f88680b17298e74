package process

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock"
)

// pool keeps pre-started containers whose root is built and which wait for
// their job spec. A sandbox is handed out once and destroyed after its job:
// a used sandbox never returns. The claiming job's limits (cgroup, rlimits),
// environment and files reach the sandbox only at claim time.
type pool struct {
	t      *Tier
	size   int
	mu     sync.Mutex
	ready  []*sandbox
	claims atomic.Int64 // sandboxes handed out
	wake   chan struct{}
	done   chan struct{}
	exited chan struct{}
}

// poolLimits are the limits a pooled sandbox starts with; the claiming
// job's replace them.
var poolLimits = airlock.DefaultLimitPolicy.Default

func newPool(t *Tier, size int) *pool {
	p := &pool{t: t, size: size, wake: make(chan struct{}, 1), done: make(chan struct{}), exited: make(chan struct{})}
	go p.fill()
	p.poke()
	return p
}

func (p *pool) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// fill keeps the pool at its size until closed.
func (p *pool) fill() {
	defer close(p.exited)
	for {
		select {
		case <-p.done:
			return
		case <-p.wake:
		}
		for {
			p.mu.Lock()
			n := len(p.ready)
			p.mu.Unlock()
			if n >= p.size {
				break
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			sb, err := p.t.start(ctx, startOptions{level: airlock.LevelContainer, limits: poolLimits, scratchMB: DefaultScratchMB})
			cancel()
			if err != nil {
				break // try again on the next claim
			}
			p.mu.Lock()
			select {
			case <-p.done:
				p.mu.Unlock()
				_ = sb.destroy()
				return
			default:
			}
			p.ready = append(p.ready, sb)
			p.mu.Unlock()
		}
	}
}

// claim takes a ready sandbox, or nil when none is ready. A sandbox whose
// stage has died while waiting is discarded.
func (p *pool) claim() *sandbox {
	defer p.poke()
	for {
		p.mu.Lock()
		var sb *sandbox
		if n := len(p.ready); n > 0 {
			sb = p.ready[n-1]
			p.ready = p.ready[:n-1]
		}
		p.mu.Unlock()
		if sb == nil {
			return nil
		}
		select {
		case <-sb.waitCh:
			_ = sb.destroy()
			continue
		default:
		}
		p.claims.Add(1)
		return sb
	}
}

// len reports how many sandboxes wait in the pool.
func (p *pool) len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ready)
}

func (p *pool) close() {
	p.mu.Lock()
	select {
	case <-p.done:
		p.mu.Unlock()
		return
	default:
	}
	close(p.done)
	ready := p.ready
	p.ready = nil
	p.mu.Unlock()
	<-p.exited
	for _, sb := range ready {
		_ = sb.destroy()
	}
}
