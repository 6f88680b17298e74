package reuse

import (
	"sync"
	"testing"
)

func TestPool(t *testing.T) {
	var p Pool[int]
	a := p.Get()
	if a == nil {
		t.Fatal("Get on an empty pool returned nil")
	}
	*a = 7
	p.Put(a)
	if b := p.Get(); b != a {
		t.Fatalf("Get after Put returned %p, want the kept %p", b, a)
	}
	// Overlapping use: every Get returns an object nobody else holds.
	var wg sync.WaitGroup
	var mu sync.Mutex
	held := map[*int]bool{}
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				v := p.Get()
				mu.Lock()
				if held[v] {
					t.Error("an object was handed out twice at once")
				}
				held[v] = true
				mu.Unlock()
				mu.Lock()
				delete(held, v)
				mu.Unlock()
				p.Put(v)
			}
		})
	}
	wg.Wait()
}
