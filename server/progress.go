package server

import (
	"context"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock"
)

// MCP tool calls that carry a progress token get the run's output as it
// comes, as the messages of notifications/progress: stdout and stderr
// interleaved as produced, sanitised as the tool result is. The sanitiser
// works on whole documents, so each batch is sanitised together with all
// output before it, and only what extends the text already sent goes out:
// the messages joined are always a sanitised document. When that cannot
// hold (a later byte changes how earlier text is read, the output is not
// UTF-8, or it outgrows progressMax) the notifications stop and the tool
// result alone carries the output.
const (
	progressMax   = 64 << 10               // output sanitised for progress, at most
	progressEvery = 100 * time.Millisecond // the shortest gap between notifications
)

type progress struct {
	s     *Server
	ctx   context.Context
	ss    *mcp.ServerSession
	token any

	mu      sync.Mutex
	pending []byte
	wake    chan struct{}
	quit    chan struct{}
	done    chan struct{}

	// The flusher's own.
	doc  []byte // the output sanitised so far (and a split character held back)
	sent string // what the messages carried
}

// newProgress returns the progress of a tool call whose client asked for
// it, or nil. Its sink goes into the run's context; finish must follow.
func (s *Server) newProgress(ctx context.Context, req *mcp.CallToolRequest) *progress {
	if req == nil || req.Session == nil || req.Params == nil {
		return nil
	}
	token := req.Params.GetProgressToken()
	if token == nil {
		return nil
	}
	p := &progress{s: s, ctx: ctx, ss: req.Session, token: token,
		wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	go p.flush()
	return p
}

func (p *progress) sink(_ airlock.Stream, b []byte) {
	p.mu.Lock()
	if len(p.pending)+len(p.doc) <= progressMax {
		p.pending = append(p.pending, b...)
	}
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// finish sends what is left and stops.
func (p *progress) finish() {
	close(p.quit)
	<-p.done
}

func (p *progress) flush() {
	defer close(p.done)
	for {
		final := false
		select {
		case <-p.wake:
		case <-p.quit:
			final = true
		}
		if !p.send(final) || final {
			return
		}
		select { // at most one notification per progressEvery
		case <-time.After(progressEvery):
		case <-p.quit:
			p.send(true)
			return
		}
	}
}

// send sanitises the output so far and sends what extends the text sent.
// It returns false once progress has stopped for good.
func (p *progress) send(final bool) bool {
	p.mu.Lock()
	p.doc = append(p.doc, p.pending...)
	p.pending = p.pending[:0]
	p.mu.Unlock()
	if len(p.doc) > progressMax {
		return false
	}
	doc := p.doc
	if !final {
		doc, _ = splitRune(doc)
	}
	if !utf8.Valid(doc) {
		return false
	}
	clean, _ := p.s.clean(string(doc))
	if !strings.HasPrefix(clean, p.sent) {
		return false
	}
	delta := clean[len(p.sent):]
	if delta == "" {
		return true
	}
	p.sent = clean
	err := p.ss.NotifyProgress(p.ctx, &mcp.ProgressNotificationParams{ProgressToken: p.token, Progress: float64(len(p.sent)), Message: delta})
	return err == nil
}
