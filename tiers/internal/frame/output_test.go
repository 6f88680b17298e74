package frame

import (
	"bytes"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// gate is a writer that blocks every write until it is opened.
type gate struct {
	open chan struct{}
	mu   sync.Mutex
	buf  bytes.Buffer
}

func (g *gate) Write(p []byte) (int, error) {
	<-g.open
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.buf.Write(p)
}

// TestDrainWaitsForHeldOutput: output held by a write the host is slow
// to take is waited for, however long past the idle time; output that
// stops arriving with none held ends the wait, and what comes after is
// dropped rather than sent after the exit report.
func TestDrainWaitsForHeldOutput(t *testing.T) {
	g := &gate{open: make(chan struct{})}
	o := NewOutput(g, -1)
	r, w := io.Pipe()
	copied := make(chan struct{})
	go func() { o.Copy(r, Stdout); close(copied) }()
	go func() { w.Write([]byte("held")); w.Close() }()
	drained := make(chan struct{})
	go func() { o.Drain(copied, time.Millisecond); close(drained) }()
	time.Sleep(100 * time.Millisecond) // a hundred idle times
	select {
	case <-drained:
		t.Fatal("Drain gave up on output a slow host held")
	default:
	}
	close(g.open)
	<-drained
	if typ, p, err := Read(&g.buf); err != nil || typ != Stdout || string(p) != "held" {
		t.Fatalf("forwarded %c %q %v", typ, p, err)
	}

	// A write end that outlives the job: nothing arrives, nothing is held.
	var out bytes.Buffer
	o = NewOutput(&lockedBuffer{b: &out}, -1)
	r, w = io.Pipe()
	copied = make(chan struct{})
	go func() { o.Copy(r, Stdout); close(copied) }()
	o.Drain(copied, time.Millisecond)
	w.Write([]byte(strings.Repeat("late", 10)))
	w.Close()
	<-copied
	if out.Len() != 0 {
		t.Fatalf("output that came after the drain was forwarded: %q", out.String())
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  *bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// TestWaitHeld: the wait ends with done; it gives up after a period with
// nothing held, and keeps on while output is held and for one period
// after.
func TestWaitHeld(t *testing.T) {
	const idle = 20 * time.Millisecond
	done := make(chan struct{})
	close(done)
	if !WaitHeld(done, idle, func() bool { return false }) {
		t.Error("done already: gave up")
	}
	if WaitHeld(make(chan struct{}), idle, func() bool { return false }) {
		t.Error("nothing held, never done: did not give up")
	}
	var checks atomic.Int32
	late := make(chan struct{})
	go func() { time.Sleep(6 * idle); close(late) }()
	// Held for the first four checks, then let go: done comes within the
	// extra period.
	if !WaitHeld(late, 2*idle, func() bool { return checks.Add(1) <= 2 }) {
		t.Errorf("gave up while output was held (after %d checks)", checks.Load())
	}
}
