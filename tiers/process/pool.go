package process

import (
	"context"
	"errors"
	"fmt"
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
	// afterEnd, when set, calls f without blocking once a used instance
	// has ended, from a goroutine that learns of that anyway; release then
	// starts no goroutine on the caller's path. Set before the pool is
	// shared.
	afterEnd func(v T, f func())

	mu      sync.Mutex
	ready   []T
	pending int           // used instances being destroyed in the background
	lastErr error         // the last start's failure, nil after a success
	changed chan struct{} // closed and replaced whenever the above change
	claims  atomic.Int64  // instances handed out
	misses  atomic.Int64  // claims that found no ready instance
	wake    chan struct{}
	done    chan struct{}
	exited  chan struct{}
	discard sync.WaitGroup // background destroys
}

// poolLimits are the limits a pooled container starts with; the claiming
// job's replace them.
var poolLimits = airlock.DefaultLimitPolicy.Default

func newPool[T any](size int, start func(context.Context) (T, error), alive func(T) bool, destroy func(T)) *pool[T] {
	p := &pool[T]{size: size, start: start, alive: alive, destroy: destroy,
		wake: make(chan struct{}, 1), done: make(chan struct{}), exited: make(chan struct{}), changed: make(chan struct{})}
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
				p.mu.Lock()
				p.lastErr = err
				p.notify()
				p.mu.Unlock()
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
			p.lastErr = nil
			p.notify()
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
			p.misses.Add(1)
			p.poke()
			var none T // not a dead instance discarded on the way
			return none, false
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

// stats returns the pool's counters.
func (p *pool[T]) stats() airlock.PoolStats {
	p.mu.Lock()
	ready := len(p.ready)
	p.mu.Unlock()
	return airlock.PoolStats{Size: p.size, Ready: ready, Hits: uint64(p.claims.Load()), Misses: uint64(p.misses.Load())}
}

// refill asks the pool to start replacements for what was claimed.
func (p *pool[T]) refill() { p.poke() }

// notify wakes the waiters of wait; p.mu is held.
func (p *pool[T]) notify() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// release destroys a used instance in the background, off the caller's
// path, and asks for a replacement.
func (p *pool[T]) release(v T) {
	p.mu.Lock()
	p.pending++
	p.mu.Unlock()
	p.discard.Add(1)
	destroy := func() {
		go func() {
			defer p.discard.Done()
			p.destroy(v)
			p.mu.Lock()
			p.pending--
			p.notify()
			p.mu.Unlock()
		}()
		p.poke()
	}
	if p.afterEnd != nil {
		p.afterEnd(v, destroy)
		return
	}
	destroy()
}

// wait blocks until the pool is full and no used instance is still being
// destroyed, or ctx ends. It returns the last start's error when starting
// a replacement fails (it is retried on every wait).
func (p *pool[T]) wait(ctx context.Context) error {
	for {
		p.mu.Lock()
		full, ch, err := len(p.ready) >= p.size && p.pending == 0, p.changed, p.lastErr
		p.lastErr = nil
		p.mu.Unlock()
		switch {
		case full:
			return nil
		case err != nil:
			return fmt.Errorf("warming pool: %w", err)
		case exitedCh(p.done):
			return errors.New("warming pool: closed")
		}
		p.poke()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

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
	p.notify()
	p.mu.Unlock()
	<-p.exited
	for _, v := range ready {
		p.destroy(v)
	}
	p.discard.Wait()
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
