// Package reuse keeps objects for reuse on warm paths.
package reuse

import "sync"

// Pool holds reusable *T. The zero value is ready; Get returns a new(T)
// when nothing is kept. Callers reset what they Put.
type Pool[T any] struct {
	pool sync.Pool
}

// Get returns a kept object or a new one.
func (p *Pool[T]) Get() *T {
	if v, ok := p.pool.Get().(*T); ok {
		return v
	}
	return new(T)
}

// Put keeps v for a later Get.
func (p *Pool[T]) Put(v *T) { p.pool.Put(v) }
