package gvisor

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock"
)

// output collects a job's stdout and stderr up to a shared cap. Past the
// cap it keeps draining (so the sandbox never blocks on a full pipe) and
// calls over once.
type output struct {
	mu             sync.Mutex
	limit, n       int64
	stdout, stderr strings.Builder
	over           func()
	overDone       bool
	sink           func(airlock.Stream, []byte) // airlock.OutputSink, or nil
	// holdErr holds the first line of stderr back from the sink until it
	// is complete (a cold run): runsc reports a missing program there, in
	// words the Result replaces (see Tier.run), which the sink must not
	// get either.
	holdErr bool
	heldErr []byte
}

func newOutput(ctx context.Context, limit int64) *output {
	return &output{limit: limit, sink: airlock.OutputSink(ctx)}
}

func (o *output) write(b *strings.Builder, p []byte) {
	o.mu.Lock()
	room := o.limit - min(o.n, o.limit)
	keep := min(int64(len(p)), room)
	if b != nil { // nil: counted only
		b.Write(p[:keep])
	}
	o.n += int64(len(p))
	if o.sink != nil && keep > 0 { // under mu: one chunk at a time
		if b == &o.stderr {
			o.emitErr(p[:keep])
		} else {
			o.sink(airlock.Stdout, p[:keep])
		}
	}
	var over func()
	if o.n > o.limit && !o.overDone {
		o.overDone, over = true, o.over
	}
	o.mu.Unlock()
	if over != nil {
		over()
	}
}

// emitErr passes stderr to the sink, or holds it (see holdErr).
func (o *output) emitErr(p []byte) {
	if !o.holdErr {
		o.sink(airlock.Stderr, p)
		return
	}
	o.heldErr = append(o.heldErr, p...)
	if (!bytes.Contains(o.heldErr, []byte("\n")) && len(o.heldErr) < 4096) || bytes.Contains(o.heldErr, []byte(runscNotFound)) {
		return // runsc's report stays held until release
	}
	o.holdErr = false
	o.sink(airlock.Stderr, o.heldErr)
	o.heldErr = nil
}

// release ends the hold once the run is over: the sink gets what was
// held, or replacement, the Result's stderr that took the place of
// runsc's report.
func (o *output) release(replacement string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.sink == nil || !o.holdErr {
		return
	}
	o.holdErr = false
	held := o.heldErr
	if replacement != "" {
		held = []byte(replacement)
	}
	o.heldErr = nil
	if len(held) > 0 {
		o.sink(airlock.Stderr, held)
	}
}

func (o *output) strings() (string, string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.stdout.String(), o.stderr.String()
}

func (o *output) total() int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return min(o.n, o.limit)
}

// watcher enforces, from the host, the limits a sandbox cannot be trusted
// with: the wall clock, the CPU time (read from the cgroup), the output cap
// and the caller's cancellation. The first to trip records why and calls
// kill, which destroys the sandbox.
type watcher struct {
	mu     sync.Mutex
	stop   *airlock.Stop
	kill   func()
	killed chan struct{}
	quit   chan struct{}
	exited chan struct{}
	closed bool
}

// cpuPoll is how often the CPU-time limit is checked.
const cpuPoll = 50 * time.Millisecond

func newWatcher(kill func()) *watcher {
	return &watcher{kill: kill, killed: make(chan struct{}), quit: make(chan struct{}), exited: make(chan struct{})}
}

// trip records the first stop and kills the sandbox.
func (w *watcher) trip(reason airlock.StopReason, detail string) {
	w.mu.Lock()
	first := w.stop == nil && !w.closed
	if first {
		w.stop = &airlock.Stop{Reason: reason, Detail: detail}
	}
	w.mu.Unlock()
	if first {
		w.kill()
		close(w.killed)
	}
}

// watch starts enforcing the job's limits on sandbox id until done is
// called. Killing repeats `runsc delete --force` until exited is closed: a
// limit can trip while runsc is still creating the sandbox, when there is
// nothing to delete yet. If that takes longer than killGrace, client (the
// `runsc run` process group) is killed too, so the run always ends.
func (t *Tier) watch(ctx context.Context, id string, cg cgroup, l airlock.Limits, out *output, exited <-chan struct{}, client func()) *watcher {
	w := newWatcher(func() {
		deadline := time.Now().Add(killGrace)
		for {
			_, err := t.runscOut(context.Background(), "delete", "--force", id)
			select {
			case <-exited:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				logf("sandbox %s still running after being killed (%v); killing runsc", id, err)
				client()
				<-exited
				return
			}
		}
	})
	w.start(ctx, cg, 0, l, out)
	return w
}

// killGrace bounds how long killing a sandbox may take before its runsc
// client is killed as well.
const killGrace = 15 * time.Second

func (w *watcher) start(ctx context.Context, cg cgroup, cpuBase time.Duration, l airlock.Limits, out *output) {
	out.mu.Lock()
	out.over = func() { go w.trip(airlock.StopOutput, fmt.Sprintf("output exceeded %d bytes", l.OutputBytes)) }
	out.mu.Unlock()
	go func() {
		defer close(w.exited)
		wall := time.NewTimer(l.Wall())
		defer wall.Stop()
		tick := time.NewTicker(cpuPoll)
		defer tick.Stop()
		for {
			select {
			case <-w.quit:
				return
			case <-ctx.Done():
				w.trip(airlock.StopKilled, "cancelled: "+context.Cause(ctx).Error())
				return
			case <-wall.C:
				w.trip(airlock.StopTimeout, fmt.Sprintf("wall clock of %v ran out", l.Wall()))
				return
			case <-tick.C:
				if l.CPUMS > 0 && cg.path != "" && cg.cpuTime()-cpuBase > l.CPU() {
					w.trip(airlock.StopCPU, fmt.Sprintf("CPU time exceeded %v", l.CPU()))
					return
				}
			}
		}
	}()
}

// done stops watching and returns the stop that tripped, if any. A kill in
// progress is waited for, so the sandbox is gone when done returns a stop.
func (w *watcher) done() *airlock.Stop {
	close(w.quit)
	<-w.exited
	w.mu.Lock()
	w.closed = true
	stop := w.stop
	w.mu.Unlock()
	if stop != nil {
		<-w.killed
	}
	return stop
}
