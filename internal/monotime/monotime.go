// Package monotime reads the time cheaply.
//
// time.Now reads both the wall and the monotonic clock; on a virtual
// machine each read can cost more than an inline expression takes to run.
// Now derives the current time from a base instant (one time.Now) plus
// the elapsed time since it, taken from the CPU's time-stamp counter where
// that counter is invariant and has been calibrated against the monotonic
// clock, and from the monotonic clock otherwise. The base is renewed at
// least once a second, so clock adjustments are picked up, and each renewal
// checks the counter against the clock: a counter that disagrees is set
// aside until two further intervals agree. The counter is taken to be
// synchronised across CPUs, as an invariant counter is on one socket and
// on hypervisors that keep it stable; calibration checks its rate, not
// per-CPU offsets. Readings feed timings and deadlines, never security
// decisions beyond a wall-clock limit.
package monotime

import (
	"sync/atomic"
	"time"
)

// base is one time.Now reading and what extrapolates from it.
type base struct {
	wall   time.Time // with a monotonic reading
	unixNS int64     // wall in nanoseconds since the Unix epoch
	tsc    uint64    // the counter when wall was read (0: no counter)
	// nsPerTick converts counter ticks to nanoseconds; 0 until the
	// counter has been calibrated over two consistent intervals.
	nsPerTick float64
	limit     uint64  // ticks after which the base is renewed (about 1 s)
	cand      float64 // a calibration from one interval, awaiting a second
}

const (
	interval = time.Second
	// calInterval is the renewal interval while the counter is being
	// calibrated, so that a process reads it within half a second; read
	// pairs are tight enough (maxReadTicks) for that to be precise.
	calInterval = interval / 4
	// tolerance is how far two calibrations, or a prediction and the
	// clock, may disagree (relative) before the counter is distrusted.
	tolerance = 1e-4
)

var (
	cur    atomic.Pointer[base]
	useTSC = haveInvariantTSC()
)

func init() {
	now, tsc := read()
	cur.Store(&base{wall: now, unixNS: now.UnixNano(), tsc: tsc})
}

// maxReadTicks bounds the ticks between the two counter reads around one
// time.Now: a pair further apart (the goroutine was descheduled) would
// skew the calibration and is not used.
const maxReadTicks = 10_000

// read returns time.Now and, where the counter is in use, the counter at
// that instant (0 if no tight pair could be read).
func read() (time.Time, uint64) {
	if !useTSC {
		return time.Now(), 0
	}
	for range 3 {
		t1 := ticks()
		now := time.Now()
		if t2 := ticks(); t2-t1 < maxReadTicks {
			return now, t1 + (t2-t1)/2
		}
	}
	return time.Now(), 0
}

// Now returns the current time, with a monotonic reading, like time.Now.
func Now() time.Time {
	b := cur.Load()
	if b.nsPerTick != 0 {
		if d := ticks() - b.tsc; d < b.limit { // also false if the counter went back
			return b.wall.Add(time.Duration(float64(d) * b.nsPerTick))
		}
		return rebase(b)
	}
	d := time.Since(b.wall)
	if d > interval || d < 0 || (d > calInterval && b.tsc != 0) {
		return rebase(b)
	}
	return b.wall.Add(d)
}

// Calibrated reports whether Now reads the time-stamp counter.
func Calibrated() bool { return cur.Load().nsPerTick != 0 }

// WarmUp reads the clock until the counter is calibrated or the timeout
// passes (about half a second where there is an invariant counter; at
// once where there is none), so that what follows measures the steady
// state of a long-running process. It reports whether it is calibrated.
func WarmUp(timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for useTSC && !Calibrated() && time.Now().Before(deadline) {
		Now()
		time.Sleep(10 * time.Millisecond)
	}
	return Calibrated()
}

// A Stamp is an instant to measure elapsed time from. A stamp taken while
// the counter is in use holds just the counter reading and the base it
// extrapolates from: Start and Elapsed each read only the counter, and
// the instant itself is worked out only when Time or WallMicro asks for it.
type Stamp struct {
	b   *base     // the calibrated base; nil: at holds the instant
	tsc uint64    // the counter at the stamp, when b is set
	at  time.Time // the instant, when b is nil
}

// Start returns a stamp for now.
func Start() Stamp {
	b := cur.Load()
	if b.nsPerTick != 0 {
		t := ticks()
		if t-b.tsc < b.limit {
			return Stamp{b: b, tsc: t}
		}
	}
	return Stamp{at: Now()}
}

// Time returns the stamp's instant, with a monotonic reading.
func (s Stamp) Time() time.Time {
	if s.b != nil {
		return s.b.wall.Add(time.Duration(float64(s.tsc-s.b.tsc) * s.b.nsPerTick))
	}
	return s.at
}

// WallMicro returns the stamp's instant in UTC, truncated to the
// microsecond and without a monotonic reading: the form a recorded clock
// takes, at less cost than Time.
func (s Stamp) WallMicro() time.Time {
	if s.b != nil {
		ns := s.b.unixNS + int64(float64(int64(s.tsc-s.b.tsc))*s.b.nsPerTick) // within a renewal interval: fits an int64
		ns -= ns % 1000
		return time.Unix(ns/1e9, ns%1e9).UTC()
	}
	t := s.at.UTC()
	return t.Add(-time.Duration(t.Nanosecond() % 1000))
}

// Elapsed returns the time since the stamp; never negative.
func (s Stamp) Elapsed() time.Duration {
	if s.b != nil {
		if d := ticks() - s.tsc; d < 1<<40 { // also false if the counter went back
			return time.Duration(float64(int64(d)) * s.b.nsPerTick) // d < 1<<40
		}
		return Since(s.Time())
	}
	return Since(s.at)
}

// Since returns the time elapsed since t, a time from Now or time.Now;
// never negative.
func Since(t time.Time) time.Duration {
	if d := Now().Sub(t); d > 0 {
		return d
	}
	return 0
}

// rebase reads the clock afresh and, where there is a counter, calibrates
// or checks it over the interval since prev.
func rebase(prev *base) time.Time {
	now, tsc := read()
	b := &base{wall: now, unixNS: now.UnixNano(), tsc: tsc}
	if tsc != 0 {
		b.nsPerTick, b.cand = calibrate(prev, now, tsc)
		if b.nsPerTick != 0 {
			b.limit = uint64(float64(interval) / b.nsPerTick)
		}
	}
	cur.Store(b)
	return now
}

// calibrate measures nanoseconds per tick over the interval from prev to
// (now, tsc) and returns the rate to use (0: not yet, or never) and a
// candidate for the next renewal to confirm.
func calibrate(prev *base, now time.Time, tsc uint64) (rate, cand float64) {
	elapsed := now.Sub(prev.wall)
	if prev.tsc == 0 || tsc <= prev.tsc || elapsed < calInterval || elapsed > time.Minute {
		// Too short to be precise, or long enough for anything (a
		// suspended machine) to have happened: start over.
		return prev.nsPerTick, 0
	}
	m := float64(elapsed) / float64(tsc-prev.tsc)
	switch {
	case prev.nsPerTick != 0:
		// In use: the counter's prediction must match the clock, or it
		// is set aside until two further intervals agree.
		if !near(m, prev.nsPerTick) {
			return 0, m
		}
		return m, 0
	case prev.cand != 0 && near(m, prev.cand):
		return m, 0 // two intervals agree: start using the counter
	default:
		return 0, m
	}
}

func near(a, b float64) bool {
	r := a/b - 1
	return r < tolerance && r > -tolerance
}

// Micros returns the microseconds elapsed since t by the wall clock's
// monotonic reading, as a Result's timings record them.
func Micros(t time.Time) int64 { return time.Since(t).Microseconds() }
