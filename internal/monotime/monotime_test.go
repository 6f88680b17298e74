package monotime

import (
	"testing"
	"time"
)

// TestTracksWallClock compares Now with time.Now across several base
// renewals, which is also when the time-stamp counter is calibrated: on a
// machine with an invariant counter, Now must be reading it by the end.
func TestTracksWallClock(t *testing.T) {
	for i := range 5 {
		got, want := Now(), time.Now()
		// Extrapolation may put Now a little past a later time.Now.
		if d := want.Sub(got); d < -time.Millisecond || d > 50*time.Millisecond {
			t.Fatalf("round %d: Now() = %v, time.Now() = %v", i, got, want)
		}
		if diff := want.Round(0).Sub(got.Round(0)); diff < -time.Millisecond || diff > 50*time.Millisecond {
			t.Fatalf("round %d: wall readings differ by %v", i, diff)
		}
		if s := Since(want); s < 0 || s > 50*time.Millisecond {
			t.Fatalf("round %d: Since(time.Now()) = %v", i, s)
		}
		time.Sleep(600 * time.Millisecond) // crosses a renewal every other round
	}
	b := cur.Load()
	switch {
	case !useTSC:
		t.Log("no invariant time-stamp counter: Now extrapolates with the monotonic clock")
	case b.nsPerTick == 0:
		t.Errorf("the invariant time-stamp counter was not calibrated after three renewals (candidate %g ns/tick)", b.cand)
	default:
		t.Logf("time-stamp counter in use: %.4f ns per tick", b.nsPerTick)
	}
}

// TestCalibrate drives the calibration with synthetic readings: two
// agreeing intervals start the counter, a disagreeing one sets it aside,
// and intervals too short or too long are not used.
func TestCalibrate(t *testing.T) {
	t0 := time.Now()
	b0 := &base{wall: t0, tsc: 1_000_000}
	const rate = 0.4 // ns per tick
	at := func(b *base, d time.Duration, r float64) (time.Time, uint64) {
		return b.wall.Add(d), b.tsc + uint64(float64(d)/r)
	}
	now, tsc := at(b0, time.Second, rate)
	r, c := calibrate(b0, now, tsc)
	if r != 0 || c == 0 {
		t.Fatalf("first interval: rate %g, candidate %g; want 0 and a candidate", r, c)
	}
	b1 := &base{wall: now, tsc: tsc, cand: c}
	now, tsc = at(b1, time.Second, rate)
	r, c = calibrate(b1, now, tsc)
	if !near(r, rate) || c != 0 {
		t.Fatalf("second agreeing interval: rate %g, candidate %g; want %g", r, c, rate)
	}
	b2 := &base{wall: now, tsc: tsc, nsPerTick: r}
	now, tsc = at(b2, time.Second, rate*1.01)
	if r, c = calibrate(b2, now, tsc); r != 0 || c == 0 {
		t.Fatalf("a drifting counter: rate %g, candidate %g; want it set aside", r, c)
	}
	now, tsc = at(b2, time.Second/10, rate)
	if r, _ = calibrate(b2, now, tsc); r != b2.nsPerTick {
		t.Fatalf("a short interval changed the rate to %g", r)
	}
	now, tsc = at(b2, 2*time.Minute, rate*2)
	if r, _ = calibrate(b2, now, tsc); r != b2.nsPerTick {
		t.Fatalf("a very long interval changed the rate to %g", r)
	}
	if r, c = calibrate(b2, now, b2.tsc-1); r != b2.nsPerTick || c != 0 {
		t.Fatalf("a counter that went back: rate %g, candidate %g", r, c)
	}
}

func BenchmarkNow(b *testing.B) {
	b.Run("time.Now", func(b *testing.B) {
		for b.Loop() {
			_ = time.Now()
		}
	})
	b.Run("monotime.Now", func(b *testing.B) {
		Now()
		for b.Loop() {
			_ = Now()
		}
	})
}

// TestStamp checks a stamp's elapsed time against the clock, with and
// without the counter.
func TestStamp(t *testing.T) {
	for range 3 {
		s, t0 := Start(), time.Now()
		if d := t0.Sub(s.Time()); d < -time.Millisecond || d > 50*time.Millisecond {
			t.Fatalf("stamp at %v, time.Now() %v", s.Time(), t0)
		}
		time.Sleep(300 * time.Millisecond)
		got, want := s.Elapsed(), time.Since(t0)
		if diff := want - got; diff < -50*time.Millisecond || diff > 50*time.Millisecond {
			t.Fatalf("Elapsed() = %v, the clock says %v (counter in use: %v)", got, want, s.b != nil)
		}
	}
	now := time.Now()
	b := &base{wall: now, unixNS: now.UnixNano(), tsc: ticks(), nsPerTick: 1}
	s := Stamp{b: b, tsc: ticks() + 1<<50} // a counter that went back
	if d := s.Elapsed(); d < 0 || d > time.Second {
		t.Fatalf("a stamp ahead of the counter: Elapsed() = %v", d)
	}
}

// TestWarmUp: on a machine with an invariant counter, WarmUp calibrates it
// well within a second.
func TestWarmUp(t *testing.T) {
	got := WarmUp(2 * time.Second)
	if useTSC && !got {
		t.Fatal("WarmUp returned without a calibrated counter")
	}
	if !useTSC && got {
		t.Fatal("calibrated without an invariant counter")
	}
}

// TestStampWallMicro: WallMicro is Time in UTC, truncated to the
// microsecond, without the monotonic reading; with and without the counter.
func TestStampWallMicro(t *testing.T) {
	WarmUp(2 * time.Second)
	now := time.Now()
	for _, s := range []Stamp{Start(), {at: now}} {
		tm, w := s.Time(), s.WallMicro()
		if w.Location() != time.UTC {
			t.Fatalf("WallMicro() in %v, want UTC", w.Location())
		}
		if w != w.Round(0) {
			t.Fatal("WallMicro() carries a monotonic reading")
		}
		if w.Nanosecond()%1000 != 0 {
			t.Fatalf("WallMicro() %v is not a whole microsecond", w)
		}
		if d := tm.Round(0).Sub(w); d < 0 || d >= 2*time.Microsecond {
			t.Fatalf("WallMicro() %v, Time() %v: %v apart", w, tm, d)
		}
	}
	if w, want := (Stamp{at: now}).WallMicro(), now.UTC().Truncate(time.Microsecond); !w.Equal(want) {
		t.Fatalf("WallMicro() of a clock stamp %v, want %v", w, want)
	}
}

// BenchmarkStamp: what a stamp and its elapsed time cost, beside the
// counter read alone and time.Now.
func BenchmarkStamp(b *testing.B) {
	WarmUp(2 * time.Second)
	b.Run("ticks", func(b *testing.B) {
		var s uint64
		for b.Loop() {
			s += ticks()
		}
		_ = s
	})
	b.Run("start+elapsed", func(b *testing.B) {
		var d time.Duration
		for b.Loop() {
			d += Start().Elapsed()
		}
		_ = d
	})
	b.Run("start+wallmicro+elapsed", func(b *testing.B) {
		var d time.Duration
		for b.Loop() {
			s := Start()
			_ = s.WallMicro()
			d += s.Elapsed()
		}
		_ = d
	})
	b.Run("time.Now", func(b *testing.B) {
		for b.Loop() {
			_ = time.Now()
		}
	})
}
