package gvisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/hostpath"
	"github.com/airlock-sandbox/airlock/internal/jobs"
	"github.com/airlock-sandbox/airlock/tiers/internal/attachio"
	"github.com/airlock-sandbox/airlock/tiers/internal/frame"
)

var _ airlock.Attacher = (*Tier)(nil)

// errAttachEnded is what a read of an attached job's stdout returns once
// the sandbox was killed (a program that exits gives io.EOF).
var errAttachEnded = errors.New("gvisor: attached job ended")

// stderrTail bounds the unread stderr an attachment keeps.
const stderrTail = 64 << 10

// Attach runs a command job attached (see airlock.Attacher) in a pooled
// sandbox when one is ready and the job has no read grant or scratch cap,
// otherwise in a sandbox created for it whose first process is the agent.
// The job's stdin travels
// as frames on the agent's socket, its stdout and stderr come back as they
// do for Run. The program starts under the exec guard unless granted
// spawn, with the job's read grants, egress gateway and limits.
func (t *Tier) Attach(ctx context.Context, job airlock.Job) (airlock.Attached, error) {
	r := begin()
	pinned := !job.Clock.IsZero()
	job, err := t.cfg.limits.Prepare(job)
	if err != nil {
		return nil, err
	}
	if err := attachio.Check(&job); err != nil {
		return nil, err
	}
	if err := t.admit(job, pinned); err != nil {
		return nil, err
	}
	if job.Lifecycle != airlock.LifecycleEphemeral {
		return nil, &airlock.NotAdmitted{Tier: Name, Reason: "an attached job runs in a sandbox of its own (lifecycle ephemeral)"}
	}
	if t.avail != nil {
		return nil, fmt.Errorf("starting sandbox: %w", t.avail)
	}
	for _, p := range job.Grants.FS.Read {
		if err := hostpath.Check(p); err != nil {
			return nil, jobs.Invalid("grants.fs.read", "%v", err)
		}
	}
	if err := t.enter(); err != nil {
		return nil, fmt.Errorf("starting sandbox: %w", err)
	}
	img, release, err := t.acquire(ctx, job.Image)
	if err != nil {
		t.leave()
		return nil, err
	}
	r.res.Image = digest(img)
	sb := t.claimPooled(&job, img, release)
	if sb == nil {
		if sb, err = t.newAgentSandbox(modeOnce, job.Grants.FS, img, release); err != nil {
			t.leave()
			return nil, err
		}
	}
	return attachio.Start(ctx, Name, stderrTail, func(ctx context.Context, h *attachio.Handle) (airlock.Result, error) {
		defer t.leave()
		return t.runAgentWith(ctx, sb, &job, r, true, h)
	})
}

// stdinWriter sends what is written as Stdin frames on the agent's socket.
type stdinWriter struct {
	conn   net.Conn
	mu     sync.Mutex
	closed bool
}

func (w *stdinWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return 0, io.ErrClosedPipe
	}
	n := 0
	for len(p) > 0 {
		chunk := p[:min(len(p), frame.MaxChunk)]
		if err := frame.Write(w.conn, frame.Stdin, chunk); err != nil {
			return n, fmt.Errorf("%w: %v", errAttachEnded, err)
		}
		n += len(chunk)
		p = p[len(chunk):]
	}
	return n, nil
}

// Close closes the program's stdin (an empty Stdin frame).
func (w *stdinWriter) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	return frame.Write(w.conn, frame.Stdin, nil)
}
