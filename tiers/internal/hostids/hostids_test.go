package hostids

import (
	"errors"
	"testing"
)

// TestTakeAndPut: the ids of a range go to one holder at a time, across
// ranges that overlap; a full range says so; a freed id is taken again.
func TestTakeAndPut(t *testing.T) {
	small := Range{Base: 1 << 31, Count: 3}
	overlap := Range{Base: 1<<31 + 2, Count: 1}
	seen := map[uint32]bool{}
	for range 3 {
		u, err := small.Take()
		if err != nil || seen[u] || u < small.Base || u >= small.Base+small.Count {
			t.Fatalf("take: %d, %v (seen %v)", u, err, seen)
		}
		seen[u] = true
	}
	if _, err := small.Take(); !errors.Is(err, ErrNone) {
		t.Errorf("a full range: %v", err)
	}
	if _, err := overlap.Take(); !errors.Is(err, ErrNone) {
		t.Errorf("an id another range holds was taken: %v", err)
	}
	Put(small.Base + 2)
	if u, err := overlap.Take(); err != nil || u != small.Base+2 || !Held(u) {
		t.Errorf("a freed id: %d, %v", u, err)
	}
	for u := range seen {
		Put(u)
	}
	if Held(small.Base) {
		t.Error("still held after Put")
	}
}
