package value

import "testing"

func TestNewSeedInRange(t *testing.T) {
	for range 10_000 {
		if s := NewSeed(); s == 0 || s > MaxSeed {
			t.Fatalf("seed %d outside [1, %d]", s, MaxSeed)
		}
	}
}
