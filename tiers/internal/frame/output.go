package frame

import (
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// Output forwards a job's output streams (see Copy) as Stdout and Stderr
// frames to W, whole frames at a time, within a byte budget the streams
// share; past it, they are read and dropped.
type Output struct {
	W io.Writer

	mu     sync.Mutex
	budget int64
	// reads counts the reads that returned output; held, the copies that
	// hold output not yet written (a host that reads slowly holds them).
	reads atomic.Int64
	held  atomic.Int32
}

// NewOutput returns an Output to w that forwards at most budget bytes
// (negative: no bound).
func NewOutput(w io.Writer, budget int64) *Output {
	if budget < 0 {
		budget = 1<<63 - 1
	}
	return &Output{W: w, budget: budget}
}

// Copy forwards what r yields as frames of type t, until r ends.
func (o *Output) Copy(r io.Reader, t Type) {
	buf := make([]byte, MaxChunk)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			o.held.Add(1)
			o.reads.Add(1)
			o.mu.Lock()
			send := min(int64(n), o.budget)
			o.budget -= send
			if send > 0 {
				_ = Write(o.W, t, buf[:send])
			}
			o.mu.Unlock()
			o.held.Add(-1)
		}
		if err != nil {
			return
		}
	}
}

// Drain waits until done is closed (the copies have ended), once the job
// is over and its processes gone, so that the output's ends follow once
// it is read. It waits however long the host takes to read what is
// written to it: output the agent reported the exit before would be cut
// from the job's result, and, in a sandbox that runs more jobs, read as
// the next job's. Only output that stops arriving for idle while none is
// held (a write end that outlived the job, which should not happen) ends
// the wait early; what arrives after that is dropped, so that no output
// frame follows the exit report.
func (o *Output) Drain(done <-chan struct{}, idle time.Duration) {
	for {
		before := o.reads.Load()
		select {
		case <-done:
			return
		case <-time.After(idle):
		}
		if o.held.Load() == 0 && o.reads.Load() == before {
			o.mu.Lock()
			o.budget = 0
			o.mu.Unlock()
			return
		}
	}
}

// WaitHeld waits until done is closed, once a job is over, for output
// still on its way from the job's pipes: however long a slow sink holds
// it (held reports whether one does now), and one period of idle more
// once it lets go. It returns false when a whole period passes with
// nothing held before or during it (a write end that outlived the job):
// the caller then stops reading.
func WaitHeld(done <-chan struct{}, idle time.Duration, held func() bool) bool {
	timer := time.NewTimer(idle)
	defer timer.Stop()
	wasHeld := false
	for {
		select {
		case <-done:
			return true
		case <-timer.C:
		}
		now := held()
		if !now && !wasHeld {
			return false
		}
		wasHeld = now
		timer.Reset(idle)
	}
}
