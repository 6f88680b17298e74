package monotime

import (
	"testing"
	"time"
)

func TestTracksWallClock(t *testing.T) {
	for range 3 {
		got, want := Now(), time.Now()
		if d := want.Sub(got); d < 0 || d > 50*time.Millisecond {
			t.Fatalf("Now() = %v, time.Now() = %v", got, want)
		}
		if diff := want.Round(0).Sub(got.Round(0)); diff < -time.Millisecond || diff > 50*time.Millisecond {
			t.Fatalf("wall readings differ by %v", diff)
		}
		time.Sleep(600 * time.Millisecond) // crosses a rebase
	}
}

func BenchmarkNow(b *testing.B) {
	b.Run("time.Now", func(b *testing.B) {
		for b.Loop() {
			_ = time.Now()
		}
	})
	b.Run("monotime.Now", func(b *testing.B) {
		for b.Loop() {
			_ = Now()
		}
	})
}
