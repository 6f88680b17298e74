package server

import (
	"errors"
	"mime"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/jsonappend"
	"github.com/airlock-sandbox/airlock/internal/wirebytes"
)

// The media types a run may be answered in as it runs.
const (
	ndjsonType = "application/x-ndjson"
	sseType    = "text/event-stream"
)

// streamFormat is the streamed answer the request's Accept header asks
// for (ndjsonType or sseType), or "" for the one JSON Result.
func streamFormat(r *http.Request) string {
	for _, h := range r.Header.Values("Accept") {
		for part := range strings.SplitSeq(h, ",") {
			mt, _, err := mime.ParseMediaType(strings.TrimSpace(part))
			if err == nil && (mt == ndjsonType || mt == sseType) {
				return mt
			}
		}
	}
	return ""
}

// stream answers a run as it goes: the status (200) and headers once the
// job is about to run, one line (ndjson) or event (SSE) per stretch of
// output, flushed at once, and the Result last. Refusals before the run
// are answered as without streaming. The tier's sink only queues (a copy
// of) each chunk, so a slow client never holds up the job's output; the
// queue is bounded by the job's output cap.
type stream struct {
	s   *Server
	w   http.ResponseWriter
	rc  *http.ResponseController
	sse bool

	mu      sync.Mutex
	queue   []chunk
	closing bool
	wake    chan struct{} // the writer has something to do
	done    chan struct{} // the writer has written everything queued
	started bool          // set only by start, on the handler's goroutine

	held [3][]byte // per stream: the start of a character a chunk split
}

type chunk struct {
	stream airlock.Stream
	p      []byte
}

func (s *Server) newStream(w http.ResponseWriter, format string) *stream {
	return &stream{s: s, w: w, rc: http.NewResponseController(w), sse: format == sseType,
		wake: make(chan struct{}, 1), done: make(chan struct{})}
}

// start commits the answer to 200 and starts the writer.
func (st *stream) start() {
	if st.started {
		return
	}
	st.started = true
	h := st.w.Header()
	if st.sse {
		h.Set("Content-Type", sseType)
	} else {
		h.Set("Content-Type", ndjsonType)
	}
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // a buffering proxy would hold the lines back
	st.extend()
	st.w.WriteHeader(http.StatusOK)
	_ = st.rc.Flush()
	go st.write()
}

// sink is the run's output sink.
func (st *stream) sink(stream airlock.Stream, p []byte) {
	st.mu.Lock()
	st.queue = append(st.queue, chunk{stream, append([]byte(nil), p...)})
	st.mu.Unlock()
	select {
	case st.wake <- struct{}{}:
	default:
	}
}

// write writes what is queued until finish closes the stream.
func (st *stream) write() {
	defer close(st.done)
	var b []byte
	for {
		<-st.wake
		st.mu.Lock()
		q, closing := st.queue, st.closing
		st.queue = nil
		st.mu.Unlock()
		b = b[:0]
		for i := 0; i < len(q); {
			// Consecutive chunks of one stream go out as one line.
			j, data := i+1, q[i].p
			for ; j < len(q) && q[j].stream == q[i].stream; j++ {
				data = append(data, q[j].p...)
			}
			b = st.appendOutput(b, q[i].stream, data, closing && j == len(q))
			i = j
		}
		if closing {
			for _, sm := range []airlock.Stream{airlock.Stdout, airlock.Stderr} {
				b = st.appendOutput(b, sm, nil, true) // what is still held
			}
		}
		if len(b) > 0 {
			// A client that went away fails the write; its run is
			// cancelled with the request, and the queue still drains.
			st.extend()
			if _, err := st.w.Write(b); err == nil {
				_ = st.rc.Flush()
			}
		}
		if closing {
			return
		}
	}
}

// appendOutput appends one output line or event for data, after what an
// earlier chunk of the stream held back. A character split between chunks
// is held back for the next one (unless last), so UTF-8 output stays a
// JSON string rather than turning into base64 at a chunk's edge.
func (st *stream) appendOutput(b []byte, stream airlock.Stream, data []byte, last bool) []byte {
	if held := st.held[stream]; len(held) > 0 {
		data = append(held, data...)
		st.held[stream] = nil
	}
	if !last {
		data, st.held[stream] = splitRune(data)
	}
	if len(data) == 0 {
		return b
	}
	b = st.open(b, stream.String())
	b = wirebytes.Append(b, string(data), false)
	return st.close(b)
}

// splitRune splits p before a character its end starts but does not
// complete.
func splitRune(p []byte) (whole, rest []byte) {
	for i := len(p) - 1; i >= 0 && i > len(p)-utf8.UTFMax; i-- {
		if utf8.RuneStart(p[i]) {
			if !utf8.FullRune(p[i:]) {
				return p[:i], append([]byte(nil), p[i:]...)
			}
			break
		}
	}
	return p, nil
}

// open and close frame one member: {"name": ...}\n, or an SSE event.
func (st *stream) open(b []byte, name string) []byte {
	if st.sse {
		return append(append(append(b, "event: "...), name...), "\ndata: "...)
	}
	b = jsonappend.String(append(b, '{'), name, false)
	return append(b, ':')
}

func (st *stream) close(b []byte) []byte {
	if st.sse {
		return append(b, "\n\n"...)
	}
	return append(b, "}\n"...)
}

// finish answers the run's end: as without streaming if it never started,
// else after the output, the Result, or the error that kept it from being
// answered (its record could not be written).
func (st *stream) finish(res airlock.Result, err error) {
	if !st.started {
		st.s.answer(st.w, res, err)
		return
	}
	st.mu.Lock()
	st.closing = true
	st.mu.Unlock()
	select {
	case st.wake <- struct{}{}:
	default:
	}
	<-st.done
	var b []byte
	var au *auditUnavailable
	var ov *overloaded
	switch {
	case errors.As(err, &au):
		b = st.appendError(b, kindAudit, au.Error())
	case errors.As(err, &ov):
		b = st.appendError(b, kindOverloaded, ov.msg)
	case res.Tier == "" && err != nil && !isDenied(err):
		b = st.appendError(b, string(airlock.KindOf(err)), st.s.publicMessage(err))
	default:
		rb, aerr := appendResult(st.open(b, "result"), &res)
		if aerr != nil {
			b = st.appendError(b, string(airlock.ErrInternal), "encoding the result: "+aerr.Error())
			break
		}
		b = st.close(rb)
	}
	st.extend()
	if _, err := st.w.Write(b); err == nil {
		_ = st.rc.Flush()
	}
}

// extend gives the write that follows answerWriteTimeout (see
// extendWrite): a client that stops reading is given up, and the run's
// output with it.
func (st *stream) extend() { _ = st.rc.SetWriteDeadline(time.Now().Add(answerWriteTimeout)) }

func (st *stream) appendError(b []byte, kind, msg string) []byte {
	b = st.open(b, "error")
	b = append(b, `{"kind":`...)
	b = jsonappend.String(b, kind, false)
	b = append(b, `,"message":`...)
	b = jsonappend.String(b, clipMessage(msg), false)
	return st.close(append(b, '}'))
}

func isDenied(err error) bool {
	stop, ok := airlock.AsStop(err)
	return ok && stop.Reason == airlock.StopDenied
}
