package gvisor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/internal/runstop"
)

// OpenSession starts a sandbox kept across runs: files written to the
// scratch persist between runs, processes do not (each run's leftovers are
// killed when it ends). A run stopped by a limit or a cancellation ends
// that run's processes only. The session ends at Close, after opts.TTL of
// idleness, or when its sandbox is lost (it died, or its agent did not
// stop a run); its later runs are then refused (not admitted), saying
// why. Persistent workspaces are not supported.
func (t *Tier) OpenSession(ctx context.Context, opts airlock.SessionOptions) (airlock.Session, error) {
	if t.avail != nil {
		return nil, fmt.Errorf("starting sandbox: %w", t.avail)
	}
	if opts.Workspace != "" {
		return nil, &airlock.NotAdmitted{Tier: Name, Reason: "persistent workspaces are not supported"}
	}
	opts, err := opts.Resolve()
	if err != nil {
		return nil, err
	}
	// A session counts as in progress (enter) until its sandbox is being
	// destroyed: see forget.
	if err := t.enter(); err != nil {
		return nil, fmt.Errorf("starting sandbox: %w", err)
	}
	id := opts.ID
	type made struct {
		sb  *sandbox
		err error
	}
	ch := make(chan made, 1)
	// The session runs the default image for its whole life (the options
	// name none); its sandbox holds it until destroyed.
	go func() {
		img, release, err := t.acquire(ctx, "")
		if err != nil {
			ch <- made{nil, err}
			return
		}
		sb, err := t.newAgentSandbox(modeServe, airlock.FSGrant{}, img, release)
		ch <- made{sb, err}
	}()
	var m made
	select {
	case m = <-ch:
	case <-ctx.Done():
		go func() {
			if m := <-ch; m.sb != nil {
				t.destroyLater(m.sb)
			}
			t.leave()
		}()
		return nil, &airlock.Stop{Reason: airlock.StopKilled, Detail: "cancelled while starting the session"}
	}
	if m.err != nil {
		t.leave()
		return nil, m.err
	}
	s := &session{t: t, id: id, sb: m.sb, ttl: opts.TTL, used: time.Now()}
	t.mu.Lock()
	if t.closed { // Close did not see the session: end it here
		t.mu.Unlock()
		t.destroyLater(m.sb)
		t.leave()
		return nil, fmt.Errorf("starting sandbox: %w", errClosed)
	}
	if t.sessions == nil {
		t.sessions = map[*session]struct{}{}
	}
	t.sessions[s] = struct{}{}
	t.mu.Unlock()
	if s.ttl > 0 {
		s.timer = time.AfterFunc(s.ttl, s.expire)
	}
	return s, nil
}

type session struct {
	t     *Tier
	id    string
	ttl   time.Duration
	timer *time.Timer

	mu     sync.Mutex // one run at a time
	sb     *sandbox   // nil once closed
	reason string     // why it ended, as the refusal of a later run says
	used   time.Time  // when the last run ended (or the session opened)
	// lost is why its sandbox was lost, ending it; read without mu, which
	// a run holds.
	lost atomic.Pointer[string]
	// stopping is set by end before it waits for mu: the run in progress
	// is stopped (current) and the runs waiting their turn are refused.
	stopping atomic.Pointer[string]
	current  runstop.Run // the run in progress
}

func (s *session) ID() string { return s.id }

// Ended says why the session ended by itself (its sandbox was lost), or
// "" while it is open or once it was closed or expired.
func (s *session) Ended() string {
	if p := s.lost.Load(); p != nil {
		return *p
	}
	return ""
}

// Run runs a job in the session's sandbox.
func (s *session) Run(ctx context.Context, job airlock.Job) (airlock.Result, error) {
	r := begin()
	pinned := !job.Clock.IsZero()
	job, err := s.t.cfg.limits.Prepare(job)
	r.res.Clock, r.res.Seed = job.Clock, job.Seed
	if err != nil {
		return r.finish(err)
	}
	if err := s.t.admit(job, pinned); err != nil {
		return r.finish(err)
	}
	if len(job.Grants.FS.Read) > 0 {
		return r.finish(&airlock.NotAdmitted{Tier: Name, Reason: "read grants cannot be added to a running session"})
	}
	if job.Grants.FS.ScratchMB > 0 {
		// A mount option of the session's sandbox, made without one: the
		// run would write beyond what it may.
		return r.finish(&airlock.NotAdmitted{Tier: Name, Reason: "grants.fs.scratch_mb cannot be applied to a running session (its scratch was mounted without a cap)"})
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sb == nil {
		return r.finish(&airlock.NotAdmitted{Tier: Name, Reason: "session " + s.id + " " + s.reason})
	}
	if why := s.stopping.Load(); why != nil {
		return r.finish(&airlock.NotAdmitted{Tier: Name, Reason: "session " + s.id + " " + *why})
	}
	// Closing the session stops this run.
	ctx, end := s.current.Begin(ctx)
	defer end()
	if err := s.sameImage(ctx, job.Image); err != nil {
		return r.finish(err)
	}
	r.res.Image = digest(s.sb.img)
	if s.timer != nil {
		s.timer.Stop()
	}
	sb := s.sb
	// runAgent keeps the sandbox after a clean run, a stopped one whose
	// processes the agent killed, or a run refused before anything reached
	// it; otherwise the sandbox is being destroyed and the session is over.
	res, err := s.t.runAgent(ctx, sb, &job, r, false)
	if sb.gone {
		why := "its sandbox was lost in a run"
		if errors.Is(err, errSandboxGone) {
			why = "its sandbox died between runs"
		} else if err != nil {
			why += " that ended with: " + err.Error()
		}
		s.forget("ended: " + why)
		s.lost.Store(&why)
		if errors.Is(err, errSandboxGone) {
			// Nothing of this run ran: it is refused as the later ones.
			ended := &airlock.NotAdmitted{Tier: Name, Reason: "session " + s.id + " " + s.reason}
			res.Stdout, res.Stderr = "", ""
			res.SetError(ended)
			return res, ended
		}
		return res, err
	}
	s.used = time.Now()
	if s.timer != nil {
		s.timer.Reset(s.ttl)
	}
	return res, err
}

// Close destroys the session's sandbox. It is safe to call more than once.
func (s *session) Close() error { return s.end("is closed") }

// end destroys the session's sandbox, which later runs are told with
// reason.
func (s *session) end(reason string) error {
	if s.timer != nil {
		s.timer.Stop()
	}
	s.stopping.CompareAndSwap(nil, &reason)
	s.current.Stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.endLocked(reason)
}

// expire ends the session once it has been idle for its TTL: a timer that
// fired as a run began finds the session used since, and leaves it (the
// run resets the timer when it ends).
func (s *session) expire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if time.Since(s.used) < s.ttl {
		return
	}
	_ = s.endLocked(fmt.Sprintf("expired after %v idle", s.ttl))
}

// endLocked is end, with s.mu held.
func (s *session) endLocked(reason string) error {
	if s.sb == nil {
		return nil
	}
	sb := s.sb
	sb.hangUp()
	err := s.t.destroy(sb.id, sb.dir, true)
	sb.release()
	s.forget(reason)
	return err
}

// sameImage refuses a job naming an image other than the session's. s.mu
// is held.
func (s *session) sameImage(ctx context.Context, ref string) error {
	img := s.sb.img
	if ref == "" || (img != nil && (ref == img.Ref || ref == img.Digest)) {
		return nil
	}
	other, release, err := s.t.acquire(ctx, ref)
	if err != nil {
		return err
	}
	release()
	if digest(other) != digest(img) {
		return &airlock.NotAdmitted{Tier: Name, Reason: "the session runs image " + sessionImage(img) + ", not " + ref}
	}
	return nil
}

func sessionImage(img *image.Image) string {
	if img == nil {
		return image.Host
	}
	return img.Ref
}

// forget marks the session over (its sandbox destroyed or being destroyed
// in the background, which the tier waits for), drops it from the tier's
// open sessions and ends its count in the tier (leave). s.mu is held.
func (s *session) forget(reason string) {
	s.sb, s.reason = nil, reason
	s.t.mu.Lock()
	delete(s.t.sessions, s)
	s.t.mu.Unlock()
	s.t.leave()
}
