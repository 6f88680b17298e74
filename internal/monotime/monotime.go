// Package monotime reads the time with one clock read instead of two.
//
// time.Now reads both the wall and the monotonic clock; on a virtual
// machine each read can cost more than an inline expression takes to run.
// Now derives the wall time from a base instant plus monotonic elapsed
// time, re-reading the wall clock once a second so that clock adjustments
// are picked up.
package monotime

import (
	"sync/atomic"
	"time"
)

var base atomic.Pointer[time.Time]

func init() { rebase() }

func rebase() {
	now := time.Now()
	base.Store(&now)
}

// Now returns the current time, with a monotonic reading, like time.Now.
func Now() time.Time {
	b := base.Load()
	d := time.Since(*b)
	if d > time.Second || d < 0 {
		rebase()
		return *base.Load()
	}
	return b.Add(d)
}
