// Package attachio holds the pieces the tiers share to run a job attached
// (see airlock.Attacher).
package attachio

import (
	"context"
	"errors"
	"io"
	"sync"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/jobs"
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

// ErrKilled is the cause Kill cancels an attached run's context with.
var ErrKilled = errors.New("killed by the caller")

// Check refuses what an attached job cannot carry: stdin text (its input
// is the pipe) and collect (it has no end to collect files at).
func Check(job *airlock.Job) error {
	switch {
	case job.Stdin != "":
		return jobs.Invalid("stdin", "an attached job's input is its pipe")
	case len(job.Collect) > 0:
		return jobs.Invalid("collect", "an attached job has no end to collect files at")
	}
	return nil
}

// Handle is the caller's side of an attached job, the airlock.Attached
// the OS tiers return. The tier writes the program's stdout to Out (a
// pipe the caller reads) and its stderr to Err (a bounded tail), and
// calls Started with the program's stdin once the program runs.
type Handle struct {
	Out *io.PipeWriter
	Err *Tail

	stdoutR   *io.PipeReader
	stdin     io.WriteCloser
	cancel    context.CancelCauseFunc
	ready     chan struct{} // closed by Started
	readyOnce sync.Once
	done      chan struct{} // closed once res and err are set
	res       airlock.Result
	err       error
}

// Start runs run in the background, under a context Kill cancels, and
// returns once the program runs (run called Started) or, with run's
// error, once run ended before that. tier names the tier in that error.
func Start(ctx context.Context, tier string, stderrMax int, run func(ctx context.Context, h *Handle) (airlock.Result, error)) (*Handle, error) {
	actx, cancel := context.WithCancelCause(ctx)
	pr, pw := io.Pipe()
	h := &Handle{Out: pw, Err: NewTail(stderrMax), stdoutR: pr, cancel: cancel,
		ready: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer cancel(nil)
		h.res, h.err = run(actx, h)
		pw.CloseWithError(h.err) // nil: io.EOF
		h.Err.Close()
		close(h.done)
	}()
	select {
	case <-h.ready:
		return h, nil
	case <-h.done:
		if h.err == nil {
			h.err = errors.New(tier + ": attached job ended before it started")
		}
		return nil, h.err
	}
}

// Started hands the caller the running program's stdin.
func (h *Handle) Started(stdin io.WriteCloser) {
	h.readyOnce.Do(func() {
		h.stdin = stdin
		close(h.ready)
	})
}

func (h *Handle) Stdin() io.WriteCloser { return h.stdin }
func (h *Handle) Stdout() io.Reader     { return h.stdoutR }
func (h *Handle) Stderr() io.Reader     { return h.Err }

// Wait waits for the run to end and returns its Result.
func (h *Handle) Wait() (airlock.Result, error) {
	<-h.done
	return h.res, h.err
}

// Kill cancels the run, which destroys the sandbox.
func (h *Handle) Kill() { h.cancel(ErrKilled) }
