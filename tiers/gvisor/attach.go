package gvisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/hostpath"
	"github.com/airlock-sandbox/airlock/internal/jobs"
	"github.com/airlock-sandbox/airlock/tiers/internal/attachio"
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
// The program's stdin and stdout are the sandbox's two streams, host
// sockets it reads and writes itself; its stderr comes back as frames, as
// for Run. The program starts under the exec guard unless granted spawn,
// with the job's read grants, egress gateway and limits.
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

// acceptStreams takes a single-job sandbox's two streams, the agent's
// next connections after its own, each announced by its tag (see
// streamIn). Nothing but the agent runs in the sandbox yet.
func acceptStreams(ln *net.UnixListener) (in, out *net.UnixConn, err error) {
	defer func() {
		if err != nil {
			for _, c := range []*net.UnixConn{in, out} {
				if c != nil {
					c.Close()
				}
			}
			in, out = nil, nil
		}
	}()
	for range 2 {
		c, err := ln.AcceptUnix()
		if err != nil {
			return in, out, err
		}
		tag := make([]byte, 1)
		_ = c.SetReadDeadline(time.Now().Add(agentStartTimeout))
		if _, err := io.ReadFull(c, tag); err != nil {
			c.Close()
			return in, out, err
		}
		_ = c.SetReadDeadline(time.Time{})
		switch {
		case tag[0] == streamIn && in == nil:
			in = c
		case tag[0] == streamOut && out == nil:
			out = c
		default:
			c.Close()
			return in, out, fmt.Errorf("agent protocol: stream tag %q", tag[0])
		}
	}
	return in, out, nil
}

// streams are an attached job's stdin and stdout: connections the
// program reads and writes itself, so a message crosses the sandbox
// boundary once rather than through the agent and a pipe.
type streams struct {
	in, out *net.UnixConn
	copied  chan struct{} // closed once copyOut has read stdout to its end
	once    sync.Once
}

func newStreams(in, out *net.UnixConn) *streams {
	return &streams{in: in, out: out, copied: make(chan struct{})}
}

// close closes both streams.
func (s *streams) close() {
	s.once.Do(func() {
		s.in.Close()
		s.out.Close()
	})
}

// copyOut passes what the program writes to its stdout to f, until it
// ends.
func (s *streams) copyOut(f func([]byte)) {
	defer close(s.copied)
	buf := make([]byte, 32<<10)
	for {
		n, err := s.out.Read(buf)
		if n > 0 {
			f(buf[:n])
		}
		if err != nil {
			return
		}
	}
}

// drain waits for the program's stdout to end (for at most two seconds
// when the job ended cleanly, not at all otherwise), then closes both
// streams and waits for copyOut.
func (s *streams) drain(clean bool) {
	if clean {
		select {
		case <-s.copied:
		case <-time.After(2 * time.Second):
		}
	}
	s.close()
	<-s.copied
}

// stdin is the program's stdin for the caller.
func (s *streams) stdin() io.WriteCloser { return streamStdin{s.in} }

type streamStdin struct{ c *net.UnixConn }

func (w streamStdin) Write(p []byte) (int, error) {
	n, err := w.c.Write(p)
	if err != nil {
		err = fmt.Errorf("%w: %v", errAttachEnded, err)
	}
	return n, err
}

// Close ends the program's stdin: it reads end of file.
func (w streamStdin) Close() error { return w.c.CloseWrite() }
