// Package warmpool keeps sandboxes started ahead of their jobs, for the tiers
// whose start is slow (process containers and guarded workers, gVisor
// sandboxes, microVMs).
//
// A pool is keyed: instances of one key are interchangeable, instances of
// different keys never are (a claim for one key is never served by
// another's instance). Each key has its own target size, counters and
// last start error. An instance is handed out once and never returns: the
// claiming job's policy reaches it only at claim time, and after the job
// it is destroyed and a fresh one started in its place.
package warmpool

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock"
)

// ErrClosed is returned by WaitFull once the pool is closed.
var ErrClosed = errors.New("pool closed")

// Options describe how a pool starts, checks and destroys its instances.
type Options[K comparable, T any] struct {
	// Start starts one instance for key k. ctx ends when the pool closes
	// (or after StartTimeout).
	Start func(ctx context.Context, k K) (T, error)
	// Alive, when set, is asked on claim: an instance that died while it
	// waited is destroyed and the next one tried.
	Alive func(T) bool
	// Destroy destroys an instance that is no longer wanted: dead, expired,
	// left over at Close, or (through Release) used.
	Destroy func(T)
	// AfterEnd, when set, is given each released instance and a function
	// that destroys it; it calls that function, without blocking, once the
	// instance has ended. Release then starts no goroutine on the
	// caller's path.
	AfterEnd func(v T, destroy func())

	// Parallel is how many starts of one key may run at once (default 1).
	Parallel int
	// StartTimeout bounds each start (0: only Close ends it).
	StartTimeout time.Duration
	// Backoff is how long a key waits after a failed start before it
	// tries again by itself. With 0 it tries again only when asked for an
	// instance (a claim that misses, Done, Poke, Release, WaitFull).
	Backoff time.Duration
	// TTL, when positive, destroys and replaces ready instances whose
	// start began longer ago than TTL.
	TTL time.Duration
	// RefillDelay, when positive, holds back the start of a claimed
	// instance's replacement until a claimed job of its key reports Done,
	// or RefillDelay at most, so that the start does not compete with the
	// job for the CPU. With 0, a claim does not start a replacement by
	// itself: Done, Release or Poke does.
	RefillDelay time.Duration
	// WaitErr makes WaitFull return a failed start's error (once) instead
	// of waiting for a later start to succeed.
	WaitErr bool
	// Newest makes a claim take the newest ready instance rather than the
	// oldest: the one whose memory is likeliest still in the caches. Without
	// a TTL the oldest may then wait indefinitely.
	Newest bool
}

// Stats are one key's counters.
type Stats struct {
	Size     int    // target number of ready instances
	Ready    int    // instances ready now
	Pending  int    // released instances still being destroyed
	Hits     uint64 // claims that took a ready instance
	Misses   uint64 // claims that found none
	Created  uint64 // instances started for the pool
	Failed   uint64 // starts that failed
	Expired  uint64 // ready instances destroyed after the TTL
	LastFill time.Duration
	MeanFill time.Duration // mean time to start one instance
	LastErr  error         // the last start's failure, nil after a success
}

// PoolStats returns the counters in the root package's terms.
func (s Stats) PoolStats() airlock.PoolStats {
	st := airlock.PoolStats{Size: s.Size, Ready: s.Ready, Hits: s.Hits, Misses: s.Misses, Failed: s.Failed}
	if s.LastErr != nil {
		st.LastError = s.LastErr.Error()
	}
	return st
}

// Add adds one pool's counters to a sum of pools (a tier's totals, or an
// image's pools under several names): sizes and counts add up, and the
// sum keeps the first failure it is given.
func Add(sum *airlock.PoolStats, st airlock.PoolStats) {
	sum.Size += st.Size
	sum.Ready += st.Ready
	sum.Hits += st.Hits
	sum.Misses += st.Misses
	sum.Failed += st.Failed
	if sum.LastError == "" {
		sum.LastError = st.LastError
	}
}

// Pool keeps instances of type T ready, per key of type K.
type Pool[K comparable, T any] struct {
	o      Options[K, T]
	ctx    context.Context // ends at Close: aborts starts
	cancel context.CancelFunc

	mu      sync.Mutex
	keys    map[K]*key[T]
	closed  bool
	changed chan struct{} // closed and replaced whenever a key's state changes

	wake    chan struct{}
	done    chan struct{}
	exited  chan struct{}
	starts  sync.WaitGroup // running starts
	discard sync.WaitGroup // background destroys of released instances
}

type entry[T any] struct {
	v    T
	born time.Time // when its start began
}

type key[T any] struct {
	size     int
	ready    []entry[T] // oldest first
	starting int
	pending  int
	inUse    int       // claimed instances whose job has not reported Done
	freed    bool      // a claimed job reported Done since the last start
	held     time.Time // when a start was first held back for a running job
	stalled  bool      // a start failed (Backoff 0): wait to be asked again
	retryAt  time.Time // a start failed: no new one before
	errNew   bool      // lastErr has not been returned by WaitFull yet
	fillSum  time.Duration
	st       Stats
}

// New returns a pool with no keys; SetSize gives a key its target size.
func New[K comparable, T any](o Options[K, T]) *Pool[K, T] {
	if o.Parallel <= 0 {
		o.Parallel = 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Pool[K, T]{o: o, ctx: ctx, cancel: cancel, keys: map[K]*key[T]{},
		changed: make(chan struct{}), wake: make(chan struct{}, 1), done: make(chan struct{}), exited: make(chan struct{})}
	go p.fill()
	return p
}

// SetSize sets how many ready instances the pool keeps for k and starts
// filling. Instances beyond a lowered size are destroyed.
func (p *Pool[K, T]) SetSize(k K, n int) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	ks := p.key(k)
	ks.size, ks.st.Size = n, n
	var extra []entry[T]
	if len(ks.ready) > n {
		extra = ks.ready[:len(ks.ready)-n]
		ks.ready = append([]entry[T](nil), ks.ready[len(ks.ready)-n:]...)
	}
	p.notify()
	p.mu.Unlock()
	for _, e := range extra {
		p.o.Destroy(e.v)
	}
	p.Poke()
}

// key returns k's state, creating it; p.mu is held.
func (p *Pool[K, T]) key(k K) *key[T] {
	ks := p.keys[k]
	if ks == nil {
		ks = &key[T]{}
		p.keys[k] = ks
	}
	return ks
}

// Poke asks the pool to start what its keys lack, trying again a key
// whose last start failed.
func (p *Pool[K, T]) Poke() {
	p.mu.Lock()
	for _, ks := range p.keys {
		ks.stalled = false
	}
	p.mu.Unlock()
	p.poke()
}

// ask is Poke for one key; p.mu is held.
func (p *Pool[K, T]) ask(ks *key[T]) {
	ks.stalled = false
	p.poke()
}

func (p *Pool[K, T]) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// notify wakes the waiters of WaitFull; p.mu is held.
func (p *Pool[K, T]) notify() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// fill starts instances whenever asked, until the pool is closed.
func (p *Pool[K, T]) fill() {
	defer close(p.exited)
	var expire <-chan time.Time
	if p.o.TTL > 0 {
		tick := time.NewTicker(p.o.TTL / 2)
		defer tick.Stop()
		expire = tick.C
	}
	for {
		select {
		case <-p.done:
			return
		case <-p.wake:
		case <-expire:
			p.expire()
		}
		p.mu.Lock()
		if !p.closed {
			now := time.Now()
			for k, ks := range p.keys {
				p.startLocked(k, ks, now)
			}
		}
		p.mu.Unlock()
	}
}

// startLocked starts what k lacks, as far as its state allows; p.mu is
// held.
func (p *Pool[K, T]) startLocked(k K, ks *key[T], now time.Time) {
	for ks.starting < p.o.Parallel && len(ks.ready)+ks.starting < ks.size {
		if ks.stalled || now.Before(ks.retryAt) {
			return
		}
		if d := p.o.RefillDelay; d > 0 && ks.inUse > 0 && !ks.freed {
			if ks.held.IsZero() {
				ks.held = now
				time.AfterFunc(d, p.poke)
			}
			if now.Sub(ks.held) < d {
				return
			}
		}
		ks.held, ks.freed = time.Time{}, false
		ks.starting++
		p.starts.Add(1)
		go p.start(k, ks)
	}
}

// start starts one instance of k and adds it to the ready ones.
func (p *Pool[K, T]) start(k K, ks *key[T]) {
	defer p.starts.Done()
	ctx, cancel := p.ctx, context.CancelFunc(func() {})
	if p.o.StartTimeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, p.o.StartTimeout)
	}
	began := time.Now()
	v, err := p.o.Start(ctx, k)
	cancel()
	p.mu.Lock()
	ks.starting--
	if err != nil {
		ks.st.Failed++
		ks.st.LastErr, ks.errNew = err, true
		if p.o.Backoff > 0 {
			ks.retryAt = time.Now().Add(p.o.Backoff)
			time.AfterFunc(p.o.Backoff, p.poke)
		} else {
			ks.stalled = true
		}
		p.notify()
		p.mu.Unlock()
		return
	}
	if p.closed || len(ks.ready) >= ks.size {
		p.mu.Unlock()
		p.o.Destroy(v)
		return
	}
	ks.ready = append(ks.ready, entry[T]{v: v, born: began})
	ks.st.Created++
	ks.st.LastFill = time.Since(began)
	ks.fillSum += ks.st.LastFill
	ks.st.MeanFill = ks.fillSum / time.Duration(ks.st.Created)
	ks.st.LastErr, ks.errNew = nil, false
	p.notify()
	p.startLocked(k, ks, time.Now()) // not through the filler: a poke left over would outlive a claim
	p.mu.Unlock()
}

// expire destroys ready instances older than the TTL; the filler then
// replaces them.
func (p *Pool[K, T]) expire() {
	var old []T
	p.mu.Lock()
	for _, ks := range p.keys {
		keep := ks.ready[:0]
		for _, e := range ks.ready {
			if time.Since(e.born) > p.o.TTL {
				old = append(old, e.v)
				ks.st.Expired++
				continue
			}
			keep = append(keep, e)
		}
		clear(ks.ready[len(keep):])
		ks.ready = keep
	}
	if len(old) > 0 {
		p.notify()
	}
	p.mu.Unlock()
	for _, v := range old {
		p.o.Destroy(v)
	}
}

// Claim takes the oldest (or, with Newest, the newest) ready instance of k
// for which fits (if set) holds; ok is false when there is none, and the
// miss asks the pool for more. An instance that died while it waited is
// destroyed on the way.
func (p *Pool[K, T]) Claim(k K, fits func(T) bool) (v T, ok bool) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			var none T
			return none, false
		}
		ks := p.key(k)
		i := -1
		for j := range ks.ready {
			if p.o.Newest {
				j = len(ks.ready) - 1 - j
			}
			if fits == nil || fits(ks.ready[j].v) {
				i = j
				break
			}
		}
		if i < 0 {
			ks.st.Misses++
			p.ask(ks)
			p.mu.Unlock()
			var none T // not a dead instance destroyed on the way
			return none, false
		}
		v = ks.ready[i].v
		ks.ready = append(ks.ready[:i], ks.ready[i+1:]...)
		p.notify()
		p.mu.Unlock()
		if p.o.Alive != nil && !p.o.Alive(v) {
			p.o.Destroy(v)
			continue
		}
		p.mu.Lock()
		ks.st.Hits++
		ks.inUse++
		ks.freed = false // a Done before this claim does not end its job
		p.mu.Unlock()
		if p.o.RefillDelay > 0 {
			p.poke() // the filler holds the replacement back (see startLocked)
		}
		return v, true
	}
}

// Done reports that the job of an instance claimed for k is over: its
// replacement may start.
func (p *Pool[K, T]) Done(k K) {
	p.mu.Lock()
	ks := p.key(k)
	if ks.inUse > 0 {
		ks.inUse--
	}
	ks.freed = true
	p.ask(ks)
	p.mu.Unlock()
}

// Release destroys a used instance of k in the background (after AfterEnd
// says it ended, when set) and asks for a replacement. WaitFull waits for
// the destruction; Close too.
func (p *Pool[K, T]) Release(k K, v T) {
	p.mu.Lock()
	ks := p.key(k)
	ks.pending++
	p.mu.Unlock()
	p.discard.Add(1)
	destroy := func() {
		go func() {
			defer p.discard.Done()
			p.o.Destroy(v)
			p.mu.Lock()
			ks.pending--
			p.notify()
			p.mu.Unlock()
		}()
		p.mu.Lock()
		p.ask(ks)
		p.mu.Unlock()
	}
	if p.o.AfterEnd != nil {
		p.o.AfterEnd(v, destroy)
		return
	}
	destroy()
}

// WaitFull blocks until k has its target number of ready instances and
// none of its released instances is still being destroyed, ctx ends, or
// the pool is closed. With WaitErr it returns a failed start's error; each
// call asks for another try.
func (p *Pool[K, T]) WaitFull(ctx context.Context, k K) error {
	for {
		p.mu.Lock()
		ks := p.key(k)
		full := len(ks.ready) >= ks.size && ks.pending == 0
		var err error
		if p.o.WaitErr && ks.errNew {
			err, ks.errNew = ks.st.LastErr, false
		}
		closed, ch := p.closed, p.changed
		if !full && err == nil && !closed {
			p.ask(ks)
		}
		p.mu.Unlock()
		switch {
		case full:
			return nil
		case err != nil:
			return err
		case closed:
			return ErrClosed
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// Stats returns k's counters.
func (p *Pool[K, T]) Stats(k K) Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	ks := p.keys[k]
	if ks == nil {
		return Stats{}
	}
	s := ks.st
	s.Ready, s.Pending = len(ks.ready), ks.pending
	return s
}

// Ready returns the instances of k waiting now, oldest first, leaving
// them in the pool.
func (p *Pool[K, T]) Ready(k K) []T {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []T
	if ks := p.keys[k]; ks != nil {
		for _, e := range ks.ready {
			out = append(out, e.v)
		}
	}
	return out
}

// Close stops filling, destroys the ready instances and waits for running
// starts (whose instances it destroys) and background destroys.
func (p *Pool[K, T]) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.cancel()
	var ready []T
	for _, ks := range p.keys {
		for _, e := range ks.ready {
			ready = append(ready, e.v)
		}
		ks.ready = nil
	}
	p.notify()
	p.mu.Unlock()
	close(p.done)
	<-p.exited
	for _, v := range ready {
		p.o.Destroy(v)
	}
	p.starts.Wait()
	p.discard.Wait()
}
