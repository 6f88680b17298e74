package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"
)

// proxy is the HTTP forward proxy and CONNECT handler (see serve.go for
// how it reads requests).
type proxy struct {
	e  *engine
	ca *ca
}

// serve handles one request from door d; true if the connection became a
// tunnel (and has ended with it).
func (p *proxy) serve(ctx context.Context, w *respWriter, r *request, c net.Conn, br *bufio.Reader, d door) bool {
	if d.tunnel != nil {
		p.inner(w, r, d)
		return false
	}
	if r.Method == http.MethodConnect {
		return p.connect(ctx, w, r, c, br, d)
	}
	if !r.URL.IsAbs() || r.URL.Scheme != "http" {
		p.refuse(w, r.Request, d, target{}, http.StatusBadRequest, "not a proxy request (want an absolute http:// URL, or CONNECT for https)")
		return false
	}
	t, err := parseTarget(r.URL.Host, "http")
	if err != nil {
		p.refuse(w, r.Request, d, target{host: r.URL.Hostname()}, http.StatusForbidden, err.Error())
		return false
	}
	// RFC 9112 has a proxy ignore the Host header of an absolute-form
	// request; one naming another authority is refused instead, as
	// whatever reads the request after the proxy may not ignore it.
	if reason := hostMismatch(r.host, t, "http", "the URL's authority"); reason != "" {
		p.refuse(w, r.Request, d, t, http.StatusForbidden, reason)
		return false
	}
	p.forward(w, r.Request, "http", t, d)
	return false
}

// hostMismatch says how Host header lines fail to name t ("" if they do,
// or there are none): the name must be t's host, and a port, if given,
// t's port (clients leave out the scheme's port, and some leave out any).
func hostMismatch(hosts []string, t target, scheme, what string) string {
	for _, h := range hosts {
		ht, err := parseTarget(h, scheme)
		_, _, noPort := net.SplitHostPort(h)
		if err != nil || ht.host != t.host || (noPort == nil && ht.port != t.port) {
			return "Host " + strconv.Quote(h) + " does not match " + what + " " + t.String()
		}
	}
	return ""
}

// refuse logs a decision made before any forwarding and answers it.
func (p *proxy) refuse(w http.ResponseWriter, r *http.Request, d door, t target, status int, reason string) {
	d.record(p.e, Record{Host: t.host, Port: t.port, Method: r.Method, Path: r.URL.Path, Verdict: Deny, Reason: reason})
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
func (p *proxy) forward(w *respWriter, r *http.Request, scheme string, t target, d door) {
	resp, status, err := p.e.roundTrip(r, scheme, t, d.via)
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
			d.record(p.e, Record{Host: t.host, Port: t.port, Method: r.Method, Path: r.URL.Path, Verdict: Deny, Reason: tl.Error() + " (connection cut)"})
		}
		w.abort() // the client must not take a truncated body for a whole one
	}
}

// connect handles CONNECT: the authority must be granted (some method on
// that host and port over https); the tunnel is then terminated with the
// gateway's CA so each inner request, its method and path, is checked like
// a plain one. The scheme of a tunnel is https: the proxy terminates TLS
// in every tunnel and serves no plain HTTP inside one, so a rule limited
// to http never opens a tunnel. True if the tunnel was opened.
func (p *proxy) connect(ctx context.Context, w *respWriter, r *request, c net.Conn, br *bufio.Reader, d door) bool {
	d.via = "connect"
	t, err := parseTarget(r.Host, "")
	if err != nil {
		p.refuse(w, r.Request, d, target{host: r.Host}, http.StatusForbidden, err.Error())
		return false
	}
	if reason := bodyRefused(r.Request); reason != "" {
		p.refuse(w, r.Request, d, t, http.StatusForbidden, reason)
		return false
	}
	if reason := hostMismatch(r.host, t, "https", "the CONNECT authority"); reason != "" {
		p.refuse(w, r.Request, d, t, http.StatusForbidden, reason)
		return false
	}
	if ok, reason := p.e.policy.CheckHost("https", t.host, t.port); !ok {
		p.refuse(w, r.Request, d, t, http.StatusForbidden, reason)
		return false
	}
	d.record(p.e, Record{Host: t.host, Port: t.port, Method: r.Method, Verdict: Allow, Reason: "tunnel opened; TLS terminated for per-request checks"})
	if _, err := w.bw.WriteString("HTTP/1.1 200 Connection established\r\n\r\n"); err != nil || w.bw.Flush() != nil {
		return true
	}
	p.serveTunnel(ctx, &prefixConn{Conn: c, r: br}, t, d.remote)
	return true
}

// serveTunnel terminates TLS on a CONNECT tunnel to t and serves the
// requests inside it. The SNI must name t's host (no domain fronting by
// SNI), and so must every inner Host header. A tunnel whose client does
// not complete the handshake (one speaking plain HTTP, say, or not
// trusting the gateway's CA) is logged and closed: plain HTTP inside a
// tunnel is not served.
func (p *proxy) serveTunnel(ctx context.Context, conn net.Conn, t target, remote string) {
	d := door{via: "https", tunnel: &t, remote: remote}
	refused := false
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			sni, err := NormalizeHost(hello.ServerName)
			if err != nil || sni != t.host {
				reason := "TLS server name " + strconv.Quote(hello.ServerName) + " does not match the CONNECT authority " + t.host
				d.record(p.e, Record{Verdict: Deny, Reason: reason})
				refused = true
				return nil, errors.New(reason)
			}
			return p.ca.leaf(t.host)
		},
	}
	tconn := tls.Server(conn, cfg)
	_ = conn.SetDeadline(time.Now().Add(headTimeout))
	if err := tconn.HandshakeContext(ctx); err != nil {
		if !refused {
			d.record(p.e, Record{Verdict: Deny, Reason: "malformed request: no TLS handshake in the tunnel: " + oneLine(err.Error())})
		}
		conn.Close()
		return
	}
	_ = conn.SetDeadline(time.Time{})
	p.serveConn(ctx, tconn, d)
}

// inner checks one request inside a terminated tunnel: its Host header,
// and its URL if absolute (https, naming the tunnel's host), must name
// the CONNECT authority.
func (p *proxy) inner(w *respWriter, r *request, d door) {
	t := *d.tunnel
	named := r.host
	if r.URL.IsAbs() {
		if r.URL.Scheme != "https" {
			p.refuse(w, r.Request, d, t, http.StatusForbidden, "URL scheme "+strconv.Quote(r.URL.Scheme)+" inside a TLS tunnel")
			return
		}
		named = append([]string{r.URL.Host}, named...)
	}
	reason := hostMismatch(named, t, "https", "the CONNECT authority")
	if len(named) == 0 {
		reason = "no Host header names the CONNECT authority " + t.String()
	}
	if reason != "" {
		p.refuse(w, r.Request, d, t, http.StatusForbidden, reason)
		return
	}
	p.forward(w, r.Request, "https", t, d)
}

// prefixConn replays the bytes the proxy read ahead of a tunnel's start.
type prefixConn struct {
	net.Conn
	r io.Reader
}

func (c *prefixConn) Read(p []byte) (int, error) { return c.r.Read(p) }
