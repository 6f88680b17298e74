package egress

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/airlock-sandbox/airlock/internal/netname"
)

// The proxy reads requests off each connection itself (http.ReadRequest)
// rather than through http.Server: http.Server answers a request it cannot
// parse without calling any handler, so nothing would be logged, and it
// hides the request's own Host and Transfer-Encoding headers, which the
// checks need.

// Limits of the proxy's HTTP/1.x reading.
const (
	maxHeadBytes  = 1 << 20 // a request's line and headers (http.Server's default)
	headTimeout   = 30 * time.Second
	idleTimeout   = 90 * time.Second
	maxDrainBytes = 256 << 10 // an unread request body drained to keep the connection
)

// door says where a connection's requests come from: the proxy's listener
// (via "http": absolute http:// URLs and CONNECT) or a TLS tunnel to
// tunnel opened by CONNECT (via "https").
type door struct {
	via    string
	tunnel *target
	remote string
}

// record fills in what the door knows of a decision and logs it.
func (d door) record(e *engine, r Record) {
	r.Via, r.Remote = d.via, d.remote
	if d.tunnel != nil && r.Host == "" {
		r.Host, r.Port = d.tunnel.host, d.tunnel.port
	}
	e.record(r)
}

func remoteOf(c net.Conn) string {
	a := c.RemoteAddr()
	if a == nil {
		return ""
	}
	if s := a.String(); s != "" && s != "@" {
		return s
	}
	return a.Network() // an unnamed Unix-socket peer
}

// badRequest is a request refused before any policy ran; status answers
// it.
type badRequest struct {
	status int
	method string
	reason string
}

func (b *badRequest) Error() string { return "malformed request: " + b.reason }

// errQuiet ends a connection without an answer or a record: the client
// closed it, or left it idle, between requests.
var errQuiet = errors.New("connection ended between requests")

// request is one request read off a connection, with what http.ReadRequest
// does not keep.
type request struct {
	*http.Request
	host   []string // the Host header lines as sent
	body   *framedBody
	expect bool // the client waits for 100 Continue before sending the body
}

// serveConn serves the requests on c until it closes, a request ends it,
// or the gateway closes.
func (p *proxy) serveConn(ctx context.Context, c net.Conn, d door) {
	defer c.Close()
	br := bufio.NewReader(c)
	bw := bufio.NewWriter(c)
	for {
		req, err := readRequest(c, br)
		if err != nil {
			var bad *badRequest
			if errors.As(err, &bad) {
				d.record(p.e, Record{Method: bad.method, Verdict: Deny, Reason: bad.Error()})
				w := newRespWriter(bw, nil)
				deny(w, bad.status, bad.Error())
				_ = w.finish()
			}
			return
		}
		req.RemoteAddr = d.remote
		req.Request = req.WithContext(ctx)
		w := newRespWriter(bw, req.Request)
		if req.expect {
			// The transport reads the body from a goroutine of its own,
			// which may still run when the answer begins.
			req.body.onFirstRead = func() error {
				w.gate.Lock()
				defer w.gate.Unlock()
				if w.begun {
					return errors.New("the answer has begun")
				}
				if _, err := bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n"); err != nil {
					return err
				}
				return bw.Flush()
			}
		}
		if p.serve(ctx, w, req, c, br, d) {
			return // the connection is a tunnel now, and ended with it
		}
		if w.aborted || w.finish() != nil || w.closeConn || req.Close {
			return // the transport may still be reading the body: closing the connection ends that
		}
		if !req.body.release() {
			return
		}
	}
}

// readRequest reads one request's head off br (waiting up to idleTimeout
// for it to begin, headTimeout for the rest), checks it as http.Server
// would, and frames its body on br.
func readRequest(c net.Conn, br *bufio.Reader) (*request, error) {
	_ = c.SetReadDeadline(time.Now().Add(idleTimeout))
	if _, err := br.Peek(1); err != nil {
		return nil, errQuiet
	}
	_ = c.SetReadDeadline(time.Now().Add(headTimeout))
	head, err := readHead(br)
	_ = c.SetReadDeadline(time.Time{})
	method := firstToken(head)
	bad := func(status int, format string, args ...any) (*request, error) {
		return nil, &badRequest{status: status, method: method, reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case errors.Is(err, errHeadTooLarge):
		return bad(http.StatusRequestHeaderFieldsTooLarge, "request line and headers over %d bytes", maxHeadBytes)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return bad(http.StatusRequestTimeout, "request line and headers not complete within %s", headTimeout)
	case err != nil:
		return bad(http.StatusBadRequest, "request line and headers cut short: %v", err)
	}
	r, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(head)))
	if err != nil {
		status := http.StatusBadRequest
		if strings.Contains(err.Error(), "transfer encoding") {
			status = http.StatusNotImplemented
		}
		return bad(status, "%s", oneLine(err.Error()))
	}
	// The headers as sent: ReadRequest drops Transfer-Encoding on HTTP/1.0
	// and folds repeated Content-Length lines.
	tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(head)))
	_, _ = tp.ReadLine()
	sent, _ := tp.ReadMIMEHeader()
	hosts := sent["Host"]
	switch {
	case r.ProtoMajor != 1:
		return bad(http.StatusHTTPVersionNotSupported, "%s is not supported", r.Proto)
	case r.ProtoMinor >= 1 && len(hosts) == 0 && r.Method != http.MethodConnect:
		return bad(http.StatusBadRequest, "an HTTP/1.1 request without a Host header")
	case len(hosts) == 1 && !httpguts.ValidHostHeader(hosts[0]):
		return bad(http.StatusBadRequest, "Host header %q is not valid", hosts[0])
	case r.ProtoMinor == 0 && len(sent["Transfer-Encoding"]) > 0:
		return bad(http.StatusBadRequest, "Transfer-Encoding in an HTTP/1.0 request (faulty framing)")
	case len(sent["Transfer-Encoding"]) > 0 && len(sent["Content-Length"]) > 0:
		// RFC 9112 section 6.3: a sign of request smuggling.
		return bad(http.StatusBadRequest, "both Transfer-Encoding and Content-Length")
	}
	for k, vs := range r.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return bad(http.StatusBadRequest, "header name %q is not valid", k)
		}
		for _, v := range vs {
			if !httpguts.ValidHeaderFieldValue(v) {
				return bad(http.StatusBadRequest, "value of header %s is not valid", k)
			}
		}
	}
	req := &request{Request: r, host: hosts}
	r.Header.Del("Host")
	switch e := r.Header.Values("Expect"); {
	case len(e) == 0:
	case len(e) == 1 && strings.EqualFold(e[0], "100-continue") && r.ProtoMinor >= 1:
		req.expect = true
		r.Header.Del("Expect") // answered here, hop by hop
	default:
		return bad(http.StatusExpectationFailed, "Expect %q is not supported", strings.Join(e, ", "))
	}
	req.body = frame(r, br)
	req.body.conn = c
	r.Body = http.NoBody
	if !req.body.done {
		r.Body = req.body
	}
	return req, nil
}

var errHeadTooLarge = errors.New("request head too large")

// readHead reads a request's line and headers, through the empty line
// that ends them; a few empty lines before the request line are skipped
// (RFC 9112, section 2.2).
func readHead(br *bufio.Reader) ([]byte, error) {
	var head []byte
	for skipped := 0; ; {
		line, err := br.ReadSlice('\n')
		if len(head)+len(line) > maxHeadBytes {
			return nil, errHeadTooLarge
		}
		if err == bufio.ErrBufferFull {
			head = append(head, line...)
			continue
		}
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		blank := len(bytes.TrimRight(line, "\r\n")) == 0
		if blank && len(head) == 0 {
			if skipped++; skipped > 4 {
				return nil, errors.New("empty lines instead of a request line")
			}
			continue
		}
		head = append(head, line...)
		if blank {
			return head, nil
		}
	}
}

// firstToken is the method of a request head, if it starts with one.
func firstToken(head []byte) string {
	m, _, ok := bytes.Cut(head, []byte(" "))
	if !ok || len(m) > 32 || !netname.IsToken(string(m)) {
		return ""
	}
	return string(m)
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// framedBody is a request body read off the connection by its framing
// (Content-Length or chunked); EOF before the end is an error.
type framedBody struct {
	mu          sync.Mutex // the transport reads it from a goroutine of its own
	released    bool       // serveConn took the connection back: reads fail
	r           io.Reader
	br          *bufio.Reader
	chunked     bool
	left        int64 // Content-Length framing: bytes still to come
	done        bool  // read to its end
	started     bool
	onFirstRead func() error // sends 100 Continue
	err         error
	conn        net.Conn // the connection the body is read from
}

// SetReadDeadline bounds the reading of the body: see heldBodyTimeout.
func (b *framedBody) SetReadDeadline(t time.Time) error {
	if b.conn == nil {
		return nil
	}
	return b.conn.SetReadDeadline(t)
}

func frame(r *http.Request, br *bufio.Reader) *framedBody {
	b := &framedBody{br: br}
	switch {
	case len(r.TransferEncoding) > 0: // ReadRequest accepts only "chunked"
		b.chunked = true
		b.r = httputil.NewChunkedReader(br)
	case r.ContentLength > 0:
		b.left = r.ContentLength
		b.r = io.LimitReader(br, r.ContentLength)
	default:
		b.done = true
	}
	return b
}

func (b *framedBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.read(p)
}

func (b *framedBody) read(p []byte) (int, error) {
	if b.released {
		return 0, errors.New("request body read after its request ended")
	}
	if b.done {
		return 0, io.EOF
	}
	if b.err != nil {
		return 0, b.err
	}
	if !b.started {
		b.started = true
		if b.onFirstRead != nil {
			if b.err = b.onFirstRead(); b.err != nil {
				return 0, b.err
			}
		}
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	switch {
	case err == io.EOF && b.chunked:
		if err = skipTrailer(b.br); err == nil {
			b.done, err = true, io.EOF
		}
	case err == io.EOF && b.left > 0:
		err = io.ErrUnexpectedEOF
	case err == io.EOF:
		b.done = true
	}
	if err != nil && err != io.EOF {
		b.err = err
	}
	return n, err
}

// Close leaves the connection's bytes where they are: serveConn drains
// what a handler did not read, or ends the connection.
func (b *framedBody) Close() error { return nil }

// release reads what is left of the body so that the next request can be
// read, and makes later reads fail; false if the connection must end
// instead.
func (b *framedBody) release() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	defer func() { b.released = true }()
	if b.done {
		return true
	}
	if (!b.started && b.onFirstRead != nil) || b.err != nil {
		return false // the client has not sent it, or it broke
	}
	n, err := io.Copy(io.Discard, io.LimitReader(readerFunc(b.read), maxDrainBytes+1))
	return err == nil && n <= maxDrainBytes && b.done
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// skipTrailer reads a chunked body's trailer section, which is not
// forwarded.
func skipTrailer(br *bufio.Reader) error {
	for n := 0; n < maxHeadBytes; {
		line, err := br.ReadSlice('\n')
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		if len(bytes.TrimRight(line, "\r\n")) == 0 {
			return nil
		}
		n += len(line)
	}
	return errHeadTooLarge
}

// respWriter writes one HTTP/1.1 response on the connection, framing its
// body by the Content-Length the handler set, chunked, or (to an HTTP/1.0
// client) by closing the connection.
type respWriter struct {
	bw        *bufio.Writer
	req       *http.Request // nil: the request did not parse
	header    http.Header
	status    int
	noBody    bool
	chunked   io.WriteCloser
	left      int64 // Content-Length framing: bytes still owed; -1 without
	closeConn bool  // the connection ends after this response
	aborted   bool  // the body was cut: end the connection without finishing it
	err       error

	gate  sync.Mutex // orders a 100 Continue before the answer
	begun bool       // the answer has begun: no 100 Continue after it
}

func newRespWriter(bw *bufio.Writer, req *http.Request) *respWriter {
	return &respWriter{bw: bw, req: req, header: http.Header{}, left: -1}
}

func (w *respWriter) Header() http.Header { return w.header }

func (w *respWriter) WriteHeader(status int) {
	if w.status != 0 || status < 200 {
		return
	}
	w.gate.Lock()
	w.begun = true
	w.gate.Unlock()
	w.status = status
	h := w.header
	method := ""
	if w.req != nil {
		method = w.req.Method
	}
	w.noBody = method == http.MethodHead || status == http.StatusNoContent || status == http.StatusNotModified
	if w.req == nil || w.req.ProtoMinor == 0 || headerHasToken(h, "Connection", "close") {
		w.closeConn = true
	}
	h.Del("Transfer-Encoding")
	if cl := h.Get("Content-Length"); cl != "" {
		n, err := strconv.ParseInt(cl, 10, 64)
		if err != nil || n < 0 {
			h.Del("Content-Length")
			w.closeConn = true
		} else if !w.noBody {
			w.left = n
		}
	}
	if !w.noBody && w.left < 0 {
		if w.closeConn {
			// The body ends when the connection does.
		} else {
			h.Set("Transfer-Encoding", "chunked")
			w.chunked = httputil.NewChunkedWriter(w.bw)
		}
	}
	if w.closeConn {
		h.Set("Connection", "close")
	}
	if h.Get("Date") == "" {
		h.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	}
	_, w.err = fmt.Fprintf(w.bw, "HTTP/1.1 %03d %s\r\n", status, http.StatusText(status))
	if w.err == nil {
		w.err = h.Write(w.bw)
	}
	if w.err == nil {
		_, w.err = w.bw.WriteString("\r\n")
	}
}

func (w *respWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return 0, w.err
	}
	if w.noBody {
		return len(p), nil
	}
	if w.chunked != nil {
		return w.chunked.Write(p)
	}
	if w.left >= 0 && int64(len(p)) > w.left {
		n, _ := w.bw.Write(p[:w.left])
		w.left = 0
		w.err = errors.New("response body longer than its Content-Length")
		return n, w.err
	}
	n, err := w.bw.Write(p)
	if w.left >= 0 {
		w.left -= int64(n)
	}
	w.err = err
	return n, err
}

// abort ends the connection without finishing the response, so the client
// cannot take a cut body for a whole one.
func (w *respWriter) abort() { w.aborted = true }

// finish ends the response's body and sends what is buffered.
func (w *respWriter) finish() error {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if w.err == nil && w.chunked != nil {
		if w.err = w.chunked.Close(); w.err == nil {
			_, w.err = w.bw.WriteString("\r\n")
		}
	}
	if w.err == nil && w.left > 0 {
		w.err = errors.New("response body shorter than its Content-Length")
	}
	if err := w.bw.Flush(); w.err == nil {
		w.err = err
	}
	return w.err
}
