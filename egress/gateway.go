package egress

import (
	"bufio"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/connset"
)

// Config says what a gateway enforces and where it listens. The zero value
// of every limit takes its default; a gateway with no listeners still
// serves in-process clients ([Gateway.RoundTrip]).
type Config struct {
	// Job names the job or session in every log record.
	Job string
	// Rules are the job's grants.net: default deny.
	Rules []airlock.NetRule
	// Hosts pins names to addresses (the operator's, never the job's).
	Hosts Hosts
	// Lookup resolves granted names that are not pinned (nil: the host's
	// resolver).
	Lookup LookupFunc
	// Log receives every decision (nil: decisions are not logged).
	Log func(Record)

	// Socket is a Unix socket path to listen on, multiplexing HTTP proxy
	// and DNS streams (see [StreamHTTP]); for sandboxes with only
	// loopback, which reach it through a forwarder. A stale socket at the
	// path is replaced (any other file is an error); one gateway serves a
	// path at a time, and Close removes it.
	Socket string
	// Listen is a TCP address for the HTTP proxy (e.g. 127.0.0.1:3128).
	Listen string
	// DNS is an address for the resolver, served on UDP and TCP.
	DNS string

	// MaxRequestBytes and MaxResponseBytes cap bodies in each direction.
	MaxRequestBytes  int64
	MaxResponseBytes int64
	// DNSRate (queries per second) and DNSBurst rate-limit the resolver.
	DNSRate  float64
	DNSBurst int
	// MaxConns bounds the proxy, socket and resolver TCP connections
	// served at once (default DefaultMaxConns); one over it is answered
	// 503 (the resolver's: just closed) and closed.
	// Each may hold a request head of up to a MiB and a form body being
	// checked, so without a bound a sandbox's descriptors, not its memory
	// limit, would decide what the gateway holds for it.
	MaxConns int
	// OriginRoots verifies origins' TLS certificates (nil: system roots).
	OriginRoots *x509.CertPool
	// CATTL is the lifetime of the gateway's CA (default a day).
	CATTL time.Duration
}

// The first byte a client writes on the gateway's Unix socket says what the
// stream carries.
const (
	StreamHTTP byte = 'H' // an HTTP proxy connection (plain requests and CONNECT)
	StreamDNS  byte = 'D' // DNS over TCP framing (two-byte length, message)
)

// Gateway is one job's (or session's) egress: the proxy, the resolver and
// the in-process client, all applying the same policy.
type Gateway struct {
	e      *engine
	ca     *ca
	p      *proxy
	lns    []net.Listener
	dnsSrv []*dns.Server
	socket string
	wg     sync.WaitGroup
	once   sync.Once
	cancel context.CancelFunc
	client *http.Client
	conns  connset.Set   // Unix-socket streams, closed with the gateway
	slots  chan struct{} // one per connection served (Config.MaxConns)
}

// Start builds the policy, generates the gateway's CA and opens the
// listeners the config names. Invalid rules are an *airlock.InvalidJob.
// The gateway closes when ctx ends or Close is called.
func Start(ctx context.Context, cfg Config) (*Gateway, error) {
	e, err := newEngine(&cfg)
	if err != nil {
		return nil, err
	}
	ttl := cfg.CATTL
	if ttl <= 0 {
		ttl = DefaultCATTL
	}
	authority, err := newCA(cfg.Job, ttl)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	g := &Gateway{e: e, ca: authority, cancel: cancel, slots: make(chan struct{}, orDefault(int64(cfg.MaxConns), DefaultMaxConns))}
	g.p = &proxy{e: e, ca: authority}
	g.client = &http.Client{
		Transport: g,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= 10 {
				return errors.New("stopped after 10 redirects")
			}
			return nil // each hop goes through RoundTrip, which checks it
		},
	}
	if err := g.listen(ctx, &cfg); err != nil {
		g.Close()
		return nil, err
	}
	go func() {
		<-ctx.Done()
		g.Close()
	}()
	return g, nil
}

func (g *Gateway) listen(ctx context.Context, cfg *Config) error {
	if cfg.Socket != "" {
		if st, err := os.Lstat(cfg.Socket); err == nil && st.Mode()&os.ModeSocket != 0 {
			_ = os.Remove(cfg.Socket) // a stale socket from a crashed run
		}
		ln, err := net.Listen("unix", cfg.Socket)
		if err != nil {
			return fmt.Errorf("listening on %s: %w", cfg.Socket, err)
		}
		// The sandbox's user may be any uid; the socket's directory is
		// what controls who can reach it.
		if err := os.Chmod(cfg.Socket, 0o666); err != nil {
			ln.Close()
			return fmt.Errorf("opening %s to the sandbox: %w", cfg.Socket, err)
		}
		g.socket = cfg.Socket
		g.lns = append(g.lns, ln)
		g.serve(func() { g.demux(ctx, ln) })
	}
	if cfg.Listen != "" {
		ln, err := net.Listen("tcp", cfg.Listen)
		if err != nil {
			return fmt.Errorf("listening on %s: %w", cfg.Listen, err)
		}
		g.lns = append(g.lns, ln)
		g.serve(func() {
			g.conns.Serve(ln, func(c net.Conn) {
				defer g.contain(c, "http")
				if !g.admit(c, "http") {
					return
				}
				defer g.release()
				g.p.serveConn(ctx, c, door{via: "http", remote: remoteOf(c)})
			})
		})
	}
	if cfg.DNS != "" {
		pc, ln, err := connset.ListenDNS(cfg.DNS)
		if err != nil {
			return err
		}
		h := g.e.dnsHandler(ctx)
		ln = &slotListener{Listener: ln, g: g}
		for _, s := range []*dns.Server{g.e.dnsServer(pc, nil, h), g.e.dnsServer(nil, ln, h)} {
			started := make(chan struct{})
			s.NotifyStartedFunc = func() { close(started) }
			g.dnsSrv = append(g.dnsSrv, s)
			g.serve(func() { _ = s.ActivateAndServe() })
			<-started
		}
	}
	return nil
}

func (g *Gateway) serve(f func()) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		f()
	}()
}

// demux reads each Unix-socket stream's first byte and hands the stream to
// the proxy or the resolver.
func (g *Gateway) demux(ctx context.Context, ln net.Listener) {
	g.conns.Serve(ln, func(c net.Conn) {
		defer g.contain(c, "socket")
		if !g.admit(c, "socket") {
			return
		}
		defer g.release()
		var kind [1]byte
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(c, kind[:]); err != nil {
			c.Close()
			return
		}
		_ = c.SetReadDeadline(time.Time{})
		switch kind[0] {
		case StreamHTTP:
			// A forwarder half-closes a stream when the sandbox's client has
			// sent everything (QEMU's guestfwd, nc -N); the proxy heeds that
			// EOF only when it looks for the next request, after answering.
			g.p.serveConn(ctx, c, door{via: "http", remote: remoteOf(c)})
		case StreamDNS:
			g.e.serveDNSStream(ctx, c)
		default:
			g.e.record(Record{Via: "socket", Verdict: Deny, Reason: fmt.Sprintf("unknown stream kind %q", kind[0])})
			c.Close()
		}
	})
}

// admit takes a connection slot for c, or answers c 503 (to an HTTP
// client), logs the refusal and closes c.
func (g *Gateway) admit(c net.Conn, via string) bool {
	select {
	case g.slots <- struct{}{}:
		return true
	default:
	}
	defer c.Close()
	reason := fmt.Sprintf("too many connections: the gateway serves at most %d at once", cap(g.slots))
	g.e.record(Record{Via: via, Remote: remoteOf(c), Verdict: Deny, Reason: reason})
	if via == "socket" {
		var kind [1]byte
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		if _, err := io.ReadFull(c, kind[:]); err != nil || kind[0] != StreamHTTP {
			return false
		}
	}
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	bw := bufio.NewWriter(c)
	w := newRespWriter(bw, nil)
	deny(w, http.StatusServiceUnavailable, reason)
	if w.finish() == nil {
		// Read (briefly) what the client sent, so that closing does not
		// reset the connection before the answer is read.
		if cw, ok := c.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
			_ = c.SetReadDeadline(time.Now().Add(time.Second))
			_, _ = io.Copy(io.Discard, io.LimitReader(c, maxDrainBytes))
		}
	}
	return false
}

func (g *Gateway) release() { <-g.slots }

// slotListener is the resolver's TCP listener, whose connections take the
// gateway's slots as the proxy's do: each holds a goroutine and buffers
// until the client goes quiet, so MaxConns bounds them too. One over it
// is recorded and closed.
type slotListener struct {
	net.Listener
	g *Gateway
}

func (l *slotListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.g.slots <- struct{}{}:
			return &slotConn{Conn: c, release: sync.OnceFunc(l.g.release)}, nil
		default:
		}
		l.g.e.record(Record{Via: "dns", Remote: remoteOf(c), Verdict: Deny,
			Reason: fmt.Sprintf("too many connections: the gateway serves at most %d at once", cap(l.g.slots))})
		c.Close()
	}
}

// slotConn gives its slot back when it is closed.
type slotConn struct {
	net.Conn
	release func()
}

func (c *slotConn) Close() error {
	c.release()
	return c.Conn.Close()
}

// contain ends a connection whose handling panicked, and records it as a
// refusal, instead of ending the process: the gateway parses whatever a
// sandbox sends, and a fault in that must not take every other sandbox's
// egress (and the server around it) down with it. Deferred first, it runs
// after the connection's other deferred calls.
func (g *Gateway) contain(c net.Conn, via string) {
	if v := recover(); v != nil {
		c.Close()
		g.e.record(Record{Via: via, Remote: remoteOf(c), Verdict: Deny, Reason: fmt.Sprintf("internal error, connection ended: %v", v)})
	}
}

// SocketPath returns the Unix socket the gateway listens on ("" if none).
func (g *Gateway) SocketPath() string { return g.socket }

// ProxyAddr returns the TCP proxy's address, or nil.
func (g *Gateway) ProxyAddr() net.Addr { return g.addr("tcp") }

// DNSAddr returns the resolver's UDP address, or nil.
func (g *Gateway) DNSAddr() net.Addr {
	if len(g.dnsSrv) == 0 {
		return nil
	}
	return g.dnsSrv[0].PacketConn.LocalAddr()
}

func (g *Gateway) addr(network string) net.Addr {
	for _, ln := range g.lns {
		if ln.Addr().Network() == network {
			return ln.Addr()
		}
	}
	return nil
}

// CACertPEM returns the PEM certificate of the gateway's CA, which signs
// the certificates the proxy presents inside CONNECT tunnels. Place it in
// the sandbox and point SSL_CERT_FILE and friends at it (see [SandboxEnv]).
func (g *Gateway) CACertPEM() []byte { return append([]byte(nil), g.ca.pem...) }

// Policy returns the compiled policy.
func (g *Gateway) Policy() *Policy { return g.e.policy }

// RoundTrip sends one request under the policy, for in-process clients
// (the WASM http_request host function, the Starlark http module). A
// refusal is an *airlock.Denied with capability "net". Redirects are not
// followed here; [Gateway.Client] follows them, checking every hop.
func (g *Gateway) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL == nil || (r.URL.Scheme != "http" && r.URL.Scheme != "https") {
		err := &airlock.Denied{Capability: "net", Detail: "only http and https URLs are allowed"}
		g.e.record(Record{Via: "client", Method: r.Method, Verdict: Deny, Reason: err.Detail})
		return nil, err
	}
	t, err := parseTarget(r.URL.Host, r.URL.Scheme)
	if err != nil {
		d := &airlock.Denied{Capability: "net", Detail: err.Error()}
		g.e.record(Record{Via: "client", Host: r.URL.Host, Method: r.Method, Path: r.URL.Path, Verdict: Deny, Reason: d.Detail})
		return nil, d
	}
	if r.Host != "" && r.Host != r.URL.Host {
		if reason := hostMismatch([]string{r.Host}, t, r.URL.Scheme, "the URL's authority"); reason != "" {
			d := &airlock.Denied{Capability: "net", Detail: reason}
			g.e.record(Record{Via: "client", Host: t.host, Port: t.port, Method: r.Method, Path: r.URL.Path, Verdict: Deny, Reason: d.Detail})
			return nil, d
		}
	}
	return g.clientTrip(r, t)
}

// clientTrip is RoundTrip's check and request; a panic in them is an error
// of the request (see contain), not of the interpreter that made it.
func (g *Gateway) clientTrip(r *http.Request, t target) (resp *http.Response, err error) {
	defer func() {
		if v := recover(); v != nil {
			reason := fmt.Sprintf("internal error, request ended: %v", v)
			g.e.record(Record{Via: "client", Host: t.host, Port: t.port, Method: r.Method, Verdict: Deny, Reason: reason})
			resp, err = nil, errors.New("egress: "+reason)
		}
	}()
	resp, _, err = g.e.roundTrip(r, r.URL.Scheme, t, "client")
	return resp, err
}

// Client returns an HTTP client that sends every request, and every
// redirect hop, through [Gateway.RoundTrip].
func (g *Gateway) Client() *http.Client { return g.client }

// Do sends req with [Gateway.Client].
func (g *Gateway) Do(req *http.Request) (*http.Response, error) { return g.client.Do(req) }

// Close stops the listeners, ends open connections and removes the socket.
func (g *Gateway) Close() error {
	g.once.Do(func() {
		g.cancel()
		for _, ln := range g.lns {
			ln.Close()
		}
		for _, s := range g.dnsSrv {
			_ = s.Shutdown()
		}
		g.e.transport.CloseIdleConnections()
		g.conns.CloseAll()
		g.wg.Wait()
		if g.socket != "" {
			_ = os.Remove(g.socket)
		}
	})
	return nil
}

// Proxy and resolver addresses as seen from inside a sandbox that runs
// the forwarder.
const (
	SandboxProxyAddr = "127.0.0.1:3128"
	SandboxDNSAddr   = "127.0.0.1:53"
)

// SandboxEnv returns the environment a sandboxed job needs to use the
// gateway through the forwarder: the proxy variables (both spellings) and
// the trust variables naming caPath, where the tier placed CACertPEM.
func SandboxEnv(caPath string) []string {
	proxy := "http://" + SandboxProxyAddr
	env := []string{
		"HTTP_PROXY=" + proxy, "HTTPS_PROXY=" + proxy, "http_proxy=" + proxy, "https_proxy=" + proxy,
		"NO_PROXY=", "no_proxy=",
	}
	if caPath != "" {
		env = append(env,
			"SSL_CERT_FILE="+caPath, "REQUESTS_CA_BUNDLE="+caPath, "CURL_CA_BUNDLE="+caPath,
			"NODE_EXTRA_CA_CERTS="+caPath, "GIT_SSL_CAINFO="+caPath, "PIP_CERT="+caPath,
		)
	}
	return env
}
