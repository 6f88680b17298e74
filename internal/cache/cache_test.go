package cache

import (
	"fmt"
	"sync"
	"testing"
)

func TestBoundedAndSecondChance(t *testing.T) {
	c := New[string, int](3)
	for i := range 3 {
		c.Put(fmt.Sprint(i), i)
	}
	c.Get("0") // used: survives the next eviction
	c.Put("3", 3)
	if c.Len() != 3 {
		t.Fatalf("len %d, want 3", c.Len())
	}
	if _, ok := c.Get("0"); !ok {
		t.Fatal("recently used entry was evicted")
	}
	if _, ok := c.Get("1"); ok {
		t.Fatal("unused entry 1 should have been evicted first")
	}
	if v, ok := c.Get("3"); !ok || v != 3 {
		t.Fatalf("new entry missing: %v %v", v, ok)
	}
	c.Put("3", 33)
	if v, _ := c.Get("3"); v != 33 {
		t.Fatalf("update lost: %v", v)
	}
}

func TestConcurrent(t *testing.T) {
	c := New[int, int](16)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				k := (g*7 + i) % 40
				if v, ok := c.Get(k); ok && v != k {
					t.Errorf("key %d has value %d", k, v)
					return
				}
				c.Put(k, k)
			}
		}()
	}
	wg.Wait()
	if c.Len() > 16 {
		t.Fatalf("cache grew to %d entries, bound is 16", c.Len())
	}
}
