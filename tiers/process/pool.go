package process

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock"
)

// pool keeps pre-started instances (containers whose root is built,
// guarded workers) that wait for their job. An instance is handed out once
// and destroyed after its job: a used instance never returns. The claiming
// job's limits, environment and files reach the instance only at claim
// time.
type pool[T any] struct {
	size    int
	start   func(ctx context.Context) (T, error)
	alive   func(T) bool
	destroy func(T)

	mu     sync.Mutex
	ready  []T
	claims atomic.Int64 // instances handed out
	wake   chan struct{}
	done   chan struct{}
	exited chan struct{}
}

// poolLimits are the limits a pooled container starts with; the claiming
// job's replace them.
var poolLimits = airlock.DefaultLimitPolicy.Default

func newPool[T any](size int, start func(context.Context) (T, error), alive func(T) bool, destroy func(T)) *pool[T] {
	p := &pool[T]{size: size, start: start, alive: alive, destroy: destroy,
		wake: make(chan struct{}, 1), done: make(chan struct{}), exited: make(chan struct{})}
	go p.fill()
	p.poke()
	return p
}

func (p *pool[T]) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// fill keeps the pool at its size until closed.
func (p *pool[T]) fill() {
	defer close(p.exited)
	for {
		select {
		case <-p.done:
			return
		case <-p.wake:
		}
		for p.len() < p.size {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			v, err := p.start(ctx)
			cancel()
			if err != nil {
				break // try again on the next claim
			}
			p.mu.Lock()
			select {
			case <-p.done:
				p.mu.Unlock()
				p.destroy(v)
				return
			default:
			}
			p.ready = append(p.ready, v)
			p.mu.Unlock()
		}
	}
}

// claim takes a ready instance; ok is false when none is ready. An
// instance that died while waiting is discarded. The pool is refilled when
// the caller says its job is done (refill), so that starting the
// replacement does not compete with the job for the CPU.
func (p *pool[T]) claim() (v T, ok bool) {
	for {
		p.mu.Lock()
		n := len(p.ready)
		if n == 0 {
			p.mu.Unlock()
			p.poke()
			return v, false
		}
		v = p.ready[n-1]
		p.ready = p.ready[:n-1]
		p.mu.Unlock()
		if !p.alive(v) {
			p.destroy(v)
			continue
		}
		p.claims.Add(1)
		return v, true
	}
}

// refill asks the pool to start replacements for what was claimed.
func (p *pool[T]) refill() { p.poke() }

// len reports how many instances wait in the pool.
func (p *pool[T]) len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ready)
}

func (p *pool[T]) close() {
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
	for _, v := range ready {
		p.destroy(v)
	}
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
