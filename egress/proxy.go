package egress

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// proxy is the HTTP forward proxy and CONNECT handler.
type proxy struct {
	e     *engine
	ca    *ca
	conns *tracker // hijacked tunnels, ended when the gateway closes
}

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		p.connect(w, r)
		return
	}
	if !r.URL.IsAbs() || r.URL.Scheme != "http" {
		p.refuse(w, r, "http", target{}, http.StatusBadRequest, "not a proxy request (want an absolute http:// URL, or CONNECT for https)")
		return
	}
	t, err := parseTarget(r.URL.Host, "http")
	if err != nil {
		p.refuse(w, r, "http", target{host: r.URL.Hostname()}, http.StatusForbidden, err.Error())
		return
	}
	p.forward(w, r, "http", t, "http")
}

// refuse logs a decision made before any forwarding and answers it.
func (p *proxy) refuse(w http.ResponseWriter, r *http.Request, via string, t target, status int, reason string) {
	p.e.record(Record{Via: via, Host: t.host, Port: t.port, Method: r.Method, Path: r.URL.Path, Verdict: Deny, Reason: reason})
	deny(w, status, reason)
}

func deny(w http.ResponseWriter, status int, reason string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Airlock-Egress", "denied")
	w.Header().Set("Connection", "close")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, "airlock egress: denied: "+reason+"\n")
}

// forward sends a checked request to the origin and copies the response
// back, cutting the connection if the body passes the cap.
func (p *proxy) forward(w http.ResponseWriter, r *http.Request, scheme string, t target, via string) {
	resp, status, err := p.e.roundTrip(r, scheme, t, via)
	if err != nil {
		deny(w, status, err.Error())
		return
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	for _, h := range hopHeaders {
		w.Header().Del(h)
	}
	w.WriteHeader(resp.StatusCode)
	if _, err := io.Copy(w, resp.Body); err != nil {
		var tl errTooLarge
		if errors.As(err, &tl) {
			p.e.record(Record{Via: via, Host: t.host, Port: t.port, Method: r.Method, Path: r.URL.Path, Verdict: Deny, Reason: tl.Error() + " (connection cut)"})
		}
		panic(http.ErrAbortHandler) // the client must not take a truncated body for a whole one
	}
}

// connect handles CONNECT: the authority must be granted (some method on
// that host and port); the tunnel is then terminated with the gateway's CA
// so each inner request is checked like a plain one.
func (p *proxy) connect(w http.ResponseWriter, r *http.Request) {
	t, err := parseTarget(r.Host, "")
	if err != nil {
		p.refuse(w, r, "connect", target{host: r.Host}, http.StatusForbidden, err.Error())
		return
	}
	if ok, reason := p.e.policy.CheckHost(t.host, t.port); !ok {
		p.refuse(w, r, "connect", t, http.StatusForbidden, reason)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		p.refuse(w, r, "connect", t, http.StatusInternalServerError, "connection cannot be taken over")
		return
	}
	conn, brw, err := hj.Hijack()
	if err != nil {
		return
	}
	if !p.conns.add(conn) {
		conn.Close()
		return
	}
	defer p.conns.remove(conn)
	p.e.record(Record{Via: "connect", Host: t.host, Port: t.port, Method: r.Method, Verdict: Allow, Reason: "tunnel opened; TLS terminated for per-request checks"})
	if _, err := conn.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		conn.Close()
		return
	}
	var client net.Conn = conn
	if n := brw.Reader.Buffered(); n > 0 {
		client = &prefixConn{Conn: conn, r: io.MultiReader(io.LimitReader(brw.Reader, int64(n)), conn)}
	}
	p.serveTunnel(client, t)
}

// serveTunnel terminates TLS on a CONNECT tunnel to t and serves the
// requests inside it. The SNI must name t's host (no domain fronting by
// SNI), and so must every inner Host header.
func (p *proxy) serveTunnel(conn net.Conn, t target) {
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			sni, err := NormalizeHost(hello.ServerName)
			if err != nil || sni != t.host {
				reason := "TLS server name " + strconv.Quote(hello.ServerName) + " does not match the CONNECT authority " + t.host
				p.e.record(Record{Via: "https", Host: t.host, Port: t.port, Verdict: Deny, Reason: reason})
				return nil, errors.New(reason)
			}
			return p.ca.leaf(t.host)
		},
	}
	tconn := tls.Server(conn, cfg)
	done := make(chan struct{})
	var once sync.Once
	srv := &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { p.inner(w, r, t) }),
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       90 * time.Second,
		ErrorLog:          quietLog,
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateClosed || s == http.StateHijacked {
				once.Do(func() { close(done) })
			}
		},
	}
	_ = srv.Serve(&oneConnListener{conn: tconn})
	<-done
}

// inner checks one request inside a terminated tunnel.
func (p *proxy) inner(w http.ResponseWriter, r *http.Request, t target) {
	if r.TLS == nil {
		p.refuse(w, r, "https", t, http.StatusBadRequest, "plain request inside a TLS tunnel")
		return
	}
	ht, err := parseTarget(r.Host, "https")
	_, _, noPort := net.SplitHostPort(r.Host)
	if err != nil || ht.host != t.host || (noPort == nil && ht.port != t.port) {
		p.refuse(w, r, "https", t, http.StatusForbidden, "Host "+strconv.Quote(r.Host)+" does not match the CONNECT authority "+t.String())
		return
	}
	p.forward(w, r, "https", t, "https")
}

// prefixConn replays bytes the HTTP server buffered before the hijack.
type prefixConn struct {
	net.Conn
	r io.Reader
}

func (c *prefixConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// oneConnListener hands one connection to an http.Server, then reports
// closed.
type oneConnListener struct {
	conn net.Conn
	mu   sync.Mutex
	used bool
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.used {
		return nil, net.ErrClosed
	}
	l.used = true
	return l.conn, nil
}

func (l *oneConnListener) Close() error   { return nil }
func (l *oneConnListener) Addr() net.Addr { return l.conn.LocalAddr() }

// connListener is a listener fed from a channel: the Unix-socket
// multiplexer passes it the connections that asked for HTTP.
type connListener struct {
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
	addr net.Addr
}

func newConnListener(addr net.Addr) *connListener {
	return &connListener{ch: make(chan net.Conn), done: make(chan struct{}), addr: addr}
}

func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *connListener) push(c net.Conn) {
	select {
	case l.ch <- c:
	case <-l.done:
		c.Close()
	}
}

func (l *connListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *connListener) Addr() net.Addr { return l.addr }
