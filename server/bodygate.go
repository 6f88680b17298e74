package server

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/airlock-sandbox/airlock/internal/httpguard"
	"github.com/airlock-sandbox/airlock/internal/jobs"
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
	b := &gatedBody{ReadCloser: r.Body, slots: []chan struct{}{s.bigBodies}, wait: s.cfg.QueueWait.or(time.Second), done: r.Context().Done()}
	if t != nil {
		b.slots = append(b.slots, t.bigBodies)
	}
	r.Body = b
	return b.finish
}

type gatedBody struct {
	io.ReadCloser
	slots []chan struct{} // to take past largeBody: the server's, then the tenant's
	wait  time.Duration
	done  <-chan struct{}
	n     int64
	asked bool            // the slots were taken (or refused)
	held  []chan struct{} // the slots taken
	err   error
}

func (b *gatedBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if !b.asked && b.n+int64(len(p)) > largeBody {
		// Only the part past largeBody waits: a small body is read at once.
		if room := largeBody - b.n; room > 0 {
			p = p[:room]
		} else {
			b.asked = true
			if b.err = b.take(); b.err != nil {
				return 0, b.err
			}
		}
	}
	n, err := b.ReadCloser.Read(p)
	b.n += int64(n)
	return n, err
}

// take waits for each slot in turn, holding none if one does not come.
func (b *gatedBody) take() error {
	timer := time.NewTimer(b.wait)
	defer timer.Stop()
	for _, ch := range b.slots {
		select {
		case ch <- struct{}{}:
			b.held = append(b.held, ch)
		case <-timer.C:
			b.release()
			return &overloaded{fmt.Sprintf("too many large requests are being read (a body over %d KiB waits for one of %d slots); retry", largeBody>>10, cap(ch)), bigBodyRetryHint}
		case <-b.done:
			b.release()
			return &overloaded{"request cancelled while waiting to be read", bigBodyRetryHint}
		}
	}
	return nil
}

func (b *gatedBody) release() {
	for _, ch := range b.held {
		<-ch
	}
	b.held = nil
}

// finish gives the slots back and makes any later read fail.
func (b *gatedBody) finish() {
	b.release()
	b.asked, b.err = true, io.ErrClosedPipe
}

// gateMCP is gateBody for the MCP endpoints, whose bodies the SDK reads:
// it answers a read that failed for a body without a slot "400 failed to
// read body". The writer returned answers that as the API does (429,
// Retry-After, the reason) instead.
func (s *Server) gateMCP(w http.ResponseWriter, r *http.Request, t *tenant) (http.ResponseWriter, func()) {
	release := s.gateBody(r, t)
	return &gateWriter{ResponseWriter: w, body: r.Body.(*gatedBody), s: s}, release
}

type gateWriter struct {
	http.ResponseWriter
	body    *gatedBody
	s       *Server
	refused bool // the SDK's own answer is dropped
}

func (g *gateWriter) WriteHeader(code int) {
	var ov *overloaded
	if code == http.StatusBadRequest && !g.refused && errors.As(g.body.err, &ov) {
		g.refused = true
		h := g.ResponseWriter.Header()
		h.Del("X-Content-Type-Options")
		h.Set("Retry-After", fmt.Sprint(ov.retryAfter))
		g.s.refuse(g.ResponseWriter, http.StatusTooManyRequests, kindOverloaded, ov.msg)
		return
	}
	if !g.refused {
		g.ResponseWriter.WriteHeader(code)
	}
}

func (g *gateWriter) Write(p []byte) (int, error) {
	if g.refused {
		return len(p), nil
	}
	return g.ResponseWriter.Write(p)
}

func (g *gateWriter) Flush() {
	if f, ok := g.ResponseWriter.(http.Flusher); ok && !g.refused {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection (the SDK
// flushes its event streams through one).
func (g *gateWriter) Unwrap() http.ResponseWriter { return g.ResponseWriter }

// readError is a failure to read a request's body as the answer it
// deserves: a body that found no large-body slot is an overload (429),
// anything else the request's fault.
func readError(err error, what string) error {
	if ov := (*overloaded)(nil); errors.As(err, &ov) {
		return ov
	}
	return jobs.Invalid("", "reading %s: %s", what, err.Error())
}

// bodyReadTimeout bounds how long a request body may take to arrive (a
// variable for the tests that wait it out).
var bodyReadTimeout = httpguard.BodyReadTimeout

// withBodyDeadline bounds how long a request's body may take to arrive.
func withBodyDeadline(h http.Handler) http.Handler {
	return httpguard.BodyDeadline(h, func() time.Duration { return bodyReadTimeout })
}

// answerWriteTimeout bounds how long one write of an answer may wait for
// the client to take it: an answer (a Result with its outputs and files,
// tens of MiB) is held in memory until it is written, after the run's slot
// is free again, so a client that never reads would otherwise hold it for
// ever, and a tenant could pile such answers up without bound.
var answerWriteTimeout = time.Minute

// withWriteDeadline clears a write deadline an earlier request on the
// connection left (the answers' writes set their own, see extendWrite), and
// gives what net/http writes after the handler returns (the end of the
// answer still buffered) answerWriteTimeout. The writer is not wrapped:
// http.MaxBytesReader must reach net/http's own to end a request whose
// body is too large.
func withWriteDeadline(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		if rc.SetWriteDeadline(time.Time{}) == nil {
			defer func() { _ = rc.SetWriteDeadline(time.Now().Add(answerWriteTimeout)) }()
		}
		h.ServeHTTP(w, r)
	})
}

// extendWrite gives the write that follows answerWriteTimeout to complete.
func extendWrite(w http.ResponseWriter) {
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(answerWriteTimeout))
}
