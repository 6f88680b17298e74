package warmpool

import (
	"maps"
	"testing"
)

// TestWithSize: setting and removing a size never changes the map given.
func TestWithSize(t *testing.T) {
	a := WithSize(nil, "python", 2)
	b := WithSize(a, "node", 1)
	c := WithSize(b, "python", 0)
	if !maps.Equal(a, map[string]int{"python": 2}) || !maps.Equal(b, map[string]int{"python": 2, "node": 1}) || !maps.Equal(c, map[string]int{"node": 1}) {
		t.Errorf("a %v b %v c %v", a, b, c)
	}
}
