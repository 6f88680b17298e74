// Package reuse keeps objects for reuse on warm paths: one object in an
// atomic slot ahead of a sync.Pool. Taking the slot is one atomic swap,
// cheaper on the machines measured than the pool's per-P bookkeeping; the
// pool takes what the slot cannot hold when calls overlap.
package reuse

import (
	"sync"
	"sync/atomic"
)

// Pool holds reusable *T. The zero value is ready; Get returns a new(T)
// when nothing is kept. Callers reset what they Put.
type Pool[T any] struct {
	slot atomic.Pointer[T]
	pool sync.Pool
}

// Get returns a kept object or a new one.
func (p *Pool[T]) Get() *T {
	if v := p.slot.Swap(nil); v != nil {
		return v
	}
	if v, ok := p.pool.Get().(*T); ok {
		return v
	}
	return new(T)
}

// Put keeps v for a later Get.
func (p *Pool[T]) Put(v *T) {
	if !p.slot.CompareAndSwap(nil, v) {
		p.pool.Put(v)
	}
}
