package server

import (
	"fmt"
	"io"
	"net/http"
	"time"
)

// Large request bodies.
//
// A job may be tens of MiB, and reading and decoding one holds several
// times that in memory before any run quota applies. So once a body passes
// largeBody bytes its reader must hold a large-body slot: one of the
// server's (bigBodiesServer) and one of its tenant's (bigBodiesTenant),
// kept until the request ends. Small bodies, almost every request, never
// wait. A body that finds no slot within the queue wait is refused as
// overloaded (429, Retry-After), like a run that finds no run slot.
const (
	largeBody        = 1 << 20
	bigBodiesServer  = 4
	bigBodiesTenant  = 2
	bigBodyRetryHint = 1 // seconds
)

// gateBody makes r's body take large-body slots (the server's and, if t is
// not nil, t's) once it passes largeBody bytes, and returns the function
// that gives them back, for the handler to call when it is done (the
// http.Server closes the body it made, not this one).
func (s *Server) gateBody(r *http.Request, t *tenant) (release func()) {
	var mine chan struct{}
	if t != nil {
		mine = t.bigBodies
	}
	b := &gatedBody{ReadCloser: r.Body, all: s.bigBodies, mine: mine, wait: s.cfg.QueueWait.or(time.Second), done: r.Context().Done()}
	r.Body = b
	return b.finish
}

type gatedBody struct {
	io.ReadCloser
	all, mine chan struct{}
	wait      time.Duration
	done      <-chan struct{}
	n         int64
	held      int // slots held: 0, 1 (the server's) or 2
	err       error
}

func (b *gatedBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.held == 0 && b.n+int64(len(p)) > largeBody {
		// Only the part past largeBody waits: a small body is read at once.
		if room := largeBody - b.n; room > 0 {
			p = p[:room]
			n, err := b.ReadCloser.Read(p)
			b.n += int64(n)
			return n, err
		}
		if b.err = b.take(); b.err != nil {
			return 0, b.err
		}
	}
	n, err := b.ReadCloser.Read(p)
	b.n += int64(n)
	return n, err
}

// take waits for a server slot and then a tenant slot.
func (b *gatedBody) take() error {
	timer := time.NewTimer(b.wait)
	defer timer.Stop()
	for _, ch := range []chan struct{}{b.all, b.mine} {
		if ch == nil {
			continue
		}
		select {
		case ch <- struct{}{}:
			b.held++
		case <-timer.C:
			b.release()
			return &overloaded{fmt.Sprintf("too many large requests are being read (a body over %d KiB waits for one of %d slots); retry", largeBody>>10, cap(ch)), bigBodyRetryHint}
		case <-b.done:
			b.release()
			return &overloaded{"request cancelled while waiting to be read", bigBodyRetryHint}
		}
	}
	if b.held == 0 {
		b.held = -1 // nothing to hold: never ask again
	}
	return nil
}

func (b *gatedBody) release() {
	if b.held >= 1 {
		<-b.all
	}
	if b.held == 2 {
		<-b.mine
	}
	b.held = 0
}

// finish gives the slots back and makes any later read fail.
func (b *gatedBody) finish() {
	if b.held > 0 {
		b.release()
	}
	b.held, b.err = -1, io.ErrClosedPipe
}

// bodyReadTimeout bounds how long a request body may take to arrive: a
// client that declares a body and sends it slowly, or never, would hold
// its connection (and, past a MiB, a large-body slot) for ever.
const bodyReadTimeout = time.Minute

// withBodyDeadline sets a read deadline on requests with a body and lifts
// it once the body has been read to its end, so that a response streamed
// for longer is not cut off.
func withBodyDeadline(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody {
			rc := http.NewResponseController(w)
			if rc.SetReadDeadline(time.Now().Add(bodyReadTimeout)) == nil {
				r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
			}
		}
		h.ServeHTTP(w, r)
	})
}

type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	done bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.done {
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}
