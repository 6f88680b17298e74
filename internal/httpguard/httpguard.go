// Package httpguard bounds what one HTTP client can hold of an airlock
// server: how long its request headers and body may take to arrive, how
// long an idle connection is kept, and how many MCP sessions are open at
// once. airlock serve, airlock mcp --http and airlock mcp-wrap --http
// share it.
package httpguard

import (
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// NewServer returns an http.Server for h whose headers must arrive within
// 10 s and be at most 64 KiB, and whose idle connections close after two
// minutes. Request bodies are bounded by [BodyDeadline].
func NewServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
}

// BodyReadTimeout is how long a request body may take to arrive by
// default: a client that declares a body and sends it slowly, or never,
// would otherwise hold its connection for ever.
const BodyReadTimeout = time.Minute

// BodyDeadline sets a read deadline of timeout() on requests with a body
// and lifts it once the body has been read to its end, so that a response
// streamed for longer is not cut off.
func BodyDeadline(h http.Handler, timeout func() time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody {
			rc := http.NewResponseController(w)
			if rc.SetReadDeadline(time.Now().Add(timeout())) == nil {
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

// MaxMCPSessions bounds the MCP sessions open on one MCP server's
// streamable HTTP handler.
const MaxMCPSessions = 256

// MCPRoom counts the requests opening an MCP session on one server, so
// that requests that come at once cannot all see room for one more. The
// zero value is ready.
type MCPRoom struct{ opening atomic.Int64 }

// Enter counts a request opening a session of srv. It returns the
// sessions open or opening besides this one, and whether this one is
// within MaxMCPSessions; if so, done must be called once the request is
// served.
func (m *MCPRoom) Enter(srv *mcp.Server) (done func(), others int, ok bool) {
	n := int(m.opening.Add(1))
	for range srv.Sessions() {
		n++
	}
	done = func() { m.opening.Add(-1) }
	if n > MaxMCPSessions {
		done()
		return nil, n - 1, false
	}
	return done, n - 1, true
}
