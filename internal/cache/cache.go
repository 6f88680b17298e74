// Package cache is a small bounded map with second-chance (CLOCK)
// eviction: reads take a shared lock and set a flag, so warm lookups stay
// cheap under concurrency, and the cache never holds more than its size.
package cache

import (
	"sync"
	"sync/atomic"
)

// Cache maps keys to values, holding at most size entries.
type Cache[K comparable, V any] struct {
	mu    sync.RWMutex
	size  int
	items map[K]*entry[K, V]
	ring  []*entry[K, V]
	hand  int
}

type entry[K comparable, V any] struct {
	key  K
	val  V
	used atomic.Bool
}

// New returns a cache holding at most size entries (at least 1).
func New[K comparable, V any](size int) *Cache[K, V] {
	size = max(size, 1)
	return &Cache[K, V]{size: size, items: make(map[K]*entry[K, V], size)}
}

// Get returns the value for key and marks it recently used.
func (c *Cache[K, V]) Get(key K) (V, bool) {
	c.mu.RLock()
	e, ok := c.items[key]
	var v V
	if ok {
		v = e.val // Put may replace it, under the write lock
	}
	c.mu.RUnlock()
	if !ok {
		return v, false
	}
	if !e.used.Load() {
		e.used.Store(true)
	}
	return v, true
}

// Put stores a value, evicting an entry not used since the hand last
// passed it when the cache is full.
func (c *Cache[K, V]) Put(key K, val V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[key]; ok {
		e.val = val
		return
	}
	e := &entry[K, V]{key: key, val: val}
	if len(c.ring) < c.size {
		c.ring = append(c.ring, e)
		c.items[key] = e
		return
	}
	for {
		victim := c.ring[c.hand]
		if victim.used.Swap(false) {
			c.hand = (c.hand + 1) % c.size
			continue
		}
		delete(c.items, victim.key)
		c.ring[c.hand] = e
		c.items[key] = e
		c.hand = (c.hand + 1) % c.size
		return
	}
}

// Len returns the number of entries.
func (c *Cache[K, V]) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.items)
}
