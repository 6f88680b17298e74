// Package attachio holds the pieces the tiers share to run a job attached
// (see airlock.Attacher).
package attachio

import (
	"io"
	"sync"
)

// Tail is a pipe whose writer never blocks: it keeps at most Max bytes the
// reader has not taken, dropping the oldest. An attached job's stderr goes
// through one, so a caller that never reads it cannot stall the job.
type Tail struct {
	mu     sync.Mutex
	cond   *sync.Cond
	buf    []byte
	max    int
	closed bool
}

// NewTail returns a Tail keeping at most max unread bytes.
func NewTail(max int) *Tail {
	t := &Tail{max: max}
	t.cond = sync.NewCond(&t.mu)
	return t
}

// Write appends p, dropping the oldest unread bytes past the bound.
func (t *Tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return len(p), nil
	}
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	t.cond.Broadcast()
	return len(p), nil
}

// Read blocks until there are bytes or the writer closed; then io.EOF.
func (t *Tail) Read(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for len(t.buf) == 0 && !t.closed {
		t.cond.Wait()
	}
	if len(t.buf) == 0 {
		return 0, io.EOF
	}
	n := copy(p, t.buf)
	t.buf = append(t.buf[:0], t.buf[n:]...)
	return n, nil
}

// Close ends the stream: Read returns what is left, then io.EOF.
func (t *Tail) Close() error {
	t.mu.Lock()
	t.closed = true
	t.cond.Broadcast()
	t.mu.Unlock()
	return nil
}
