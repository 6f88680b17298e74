package frame

import (
	"bytes"
	"io"
	"strings"
	"sync"
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
