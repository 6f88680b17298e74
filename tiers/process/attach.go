package process

import (
	"context"
	"errors"
	"io"
	"os"
	"sync"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/jobs"
	"github.com/airlock-sandbox/airlock/tiers/internal/attachio"
)

var _ airlock.Attacher = (*Tier)(nil)

// errAttachEnded is what a read of an attached job's stdout returns when
// its output could not be drained.
var errAttachEnded = errors.New("process: attached job ended")

// stderrTail bounds the unread stderr an attachment keeps.
const stderrTail = 64 << 10

type attachKey struct{}

// attachOf returns the attachment run is running for, or nil.
func attachOf(ctx context.Context) *attachment {
	a, _ := ctx.Value(attachKey{}).(*attachment)
	return a
}

// Attach runs a command job attached (see airlock.Attacher) in a sandbox
// started for it (never a pooled one): the program's stdin is the caller's
// pipe from the start, its stdout goes to the caller's pipe, counted
// against the output limit, and everything else is as for Run.
func (t *Tier) Attach(ctx context.Context, job airlock.Job) (airlock.Attached, error) {
	switch {
	case job.Stdin != "":
		return nil, jobs.Invalid("stdin", "an attached job's input is its pipe")
	case len(job.Collect) > 0:
		return nil, jobs.Invalid("collect", "an attached job has no end to collect files at")
	}
	actx, cancel := context.WithCancelCause(ctx)
	pr, pw := io.Pipe()
	a := &attachment{stdoutR: pr, stdoutW: pw, stderr: attachio.NewTail(stderrTail), cancel: cancel,
		ready: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer cancel(nil)
		a.res, a.err = t.run(context.WithValue(actx, attachKey{}, a), job, nil)
		pw.CloseWithError(a.err) // nil: io.EOF
		a.stderr.Close()
		close(a.done)
	}()
	select {
	case <-a.ready:
		return a, nil
	case <-a.done:
		if a.err == nil {
			a.err = errors.New("process: attached job ended before it started")
		}
		return nil, a.err
	}
}

// attachment is one attached job.
type attachment struct {
	stdoutR *io.PipeReader
	stdoutW *io.PipeWriter
	stderr  *attachio.Tail
	cancel  context.CancelCauseFunc

	stdin     *os.File
	ready     chan struct{}
	readyOnce sync.Once
	done      chan struct{}
	res       airlock.Result
	err       error
}

func (a *attachment) started(stdin *os.File) {
	a.readyOnce.Do(func() {
		a.stdin = stdin
		close(a.ready)
	})
}

func (a *attachment) Stdin() io.WriteCloser { return a.stdin }
func (a *attachment) Stdout() io.Reader     { return a.stdoutR }
func (a *attachment) Stderr() io.Reader     { return a.stderr }

func (a *attachment) Wait() (airlock.Result, error) {
	<-a.done
	return a.res, a.err
}

// Kill cancels the run, which kills the sandbox.
func (a *attachment) Kill() { a.cancel(errors.New("killed by the caller")) }
