// Package gatewaylab is the corpus runner's lab: a real egress gateway
// (proxy and resolver) on loopback, in front of real HTTP and HTTPS
// origins and a real upstream DNS server, all on loopback, with the names
// and rules the egress corpus (corpus/egress/egress.jsonl) is written for.
// `airlock corpus` and the egress package's tests both run the corpus
// against it, through [Env.Run]. It ships in the binary, so it uses no
// test support (net/http/httptest registers a flag on the default set).
package gatewaylab

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/egress"
)

// JobName names the gateway's job in every log record.
const JobName = "test-job"

// Env is the gateway and everything around it. Close stops it all.
type Env struct {
	GW        *egress.Gateway
	HTTP      *Server
	HTTPS     *Server
	HTTPPort  string
	HTTPSPort string
	// Upstream is the address of the upstream DNS server.
	Upstream string
	// Roots verifies the gateway's CA (for clients of its proxy);
	// OriginRoots verifies the HTTPS origin.
	Roots       *x509.CertPool
	OriginRoots *x509.CertPool

	mu      sync.Mutex
	hits    []string // "METHOD host path" as the origins saw them
	logs    []egress.Record
	closers []func()
}

// UpstreamRecords is what the upstream DNS server answers.
var UpstreamRecords = map[string]string{
	"meta.test.":    "169.254.169.254",
	"v6meta.test.":  "fd00:ec2::254",
	"rebind.test.":  "127.0.0.1",
	"nat64.test.":   "64:ff9b::7f00:1",
	"mapped.test.":  "::ffff:127.0.0.1",
	"public.test.":  "93.184.215.14",
	"private.test.": "10.1.2.3",
}

// Pinned are the names pinned to the loopback origin, granted or not: a
// refusal of an ungranted one then proves that the policy refused, not
// that the name failed to resolve.
var Pinned = []string{"origin.test", "post.test", "a.wild.test", "wild.test", "evil.test", "x.origin.test", "evilorigin.test", "bücher.test",
	"git.test", "plain.test", "tls.test", "opts.test"}

// Rules are the corpus's grants, for origins listening on ports.
func Rules(ports ...int) []airlock.NetRule {
	return []airlock.NetRule{
		{Host: "origin.test", Ports: ports},
		{Host: "post.test", Methods: []string{"POST"}, Ports: ports},
		{Host: "*.wild.test", Ports: ports},
		{Host: "meta.test"}, {Host: "v6meta.test"},
		{Host: "rebind.test", Ports: ports}, {Host: "nat64.test", Ports: ports},
		{Host: "mapped.test", Ports: ports}, {Host: "public.test"}, {Host: "private.test"},
		{Host: "Bücher.test", Ports: ports},
		// A git remote that may be cloned and fetched, not pushed to.
		{Host: "git.test", Methods: []string{"GET"}, Ports: ports, Paths: []string{"*/info/refs"}},
		{Host: "git.test", Methods: []string{"POST"}, Ports: ports, Paths: []string{"*/git-upload-pack"}},
		{Host: "plain.test", Scheme: "http", Ports: ports},
		{Host: "tls.test", Scheme: "https", Ports: ports},
		// A read-only grant that includes OPTIONS (CORS preflights).
		{Host: "opts.test", Methods: []string{"GET", "HEAD", "OPTIONS"}, Ports: ports},
	}
}

// Start starts the origins, the upstream and a gateway with the corpus's
// rules; adjust, when not nil, changes the gateway's config before it
// starts (a test's socket, a deliberately weakened policy).
func Start(adjust func(*egress.Config)) (_ *Env, err error) {
	env := &Env{}
	defer func() {
		if err != nil {
			env.Close()
		}
	}()
	origin := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		env.mu.Lock()
		env.hits = append(env.hits, r.Method+" "+r.Host+" "+r.URL.Path)
		env.mu.Unlock()
		if r.URL.Path == "/redirect" {
			status, _ := strconv.Atoi(r.URL.Query().Get("status"))
			http.Redirect(w, r, r.URL.Query().Get("to"), status)
			return
		}
		w.Header().Set("X-Origin", "yes")
		fmt.Fprint(w, "origin ok")
	})
	if env.HTTP, err = Serve(origin, nil); err != nil {
		return nil, err
	}
	env.closers = append(env.closers, env.HTTP.Close)
	ca, err := egress.NewCA("egresstest origin", 24*time.Hour)
	if err != nil {
		return nil, err
	}
	env.HTTPS, err = Serve(origin, &tls.Config{
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
			return ca.Leaf(h.ServerName)
		},
	})
	if err != nil {
		return nil, err
	}
	env.closers = append(env.closers, env.HTTPS.Close)
	env.HTTPPort = portOf(env.HTTP.Listener.Addr())
	env.HTTPSPort = portOf(env.HTTPS.Listener.Addr())
	if env.Upstream, err = env.startUpstream(); err != nil {
		return nil, err
	}
	hosts := egress.Hosts{}
	for _, n := range Pinned {
		if err := hosts.Add(n, netip.MustParseAddr("127.0.0.1")); err != nil {
			return nil, err
		}
	}
	env.OriginRoots = x509.NewCertPool()
	env.OriginRoots.AddCert(ca.Certificate())
	cfg := egress.Config{
		Job:         JobName,
		Rules:       Rules(Atoi(env.HTTPPort), Atoi(env.HTTPSPort)),
		Hosts:       hosts,
		Lookup:      UpstreamLookup(env.Upstream),
		Listen:      "127.0.0.1:0",
		DNS:         "127.0.0.1:0",
		OriginRoots: env.OriginRoots,
		DNSRate:     1000,
		DNSBurst:    1000,
		Log: func(r egress.Record) {
			env.mu.Lock()
			env.logs = append(env.logs, r)
			env.mu.Unlock()
		},
	}
	if adjust != nil {
		adjust(&cfg)
	}
	if env.GW, err = egress.Start(context.Background(), cfg); err != nil {
		return nil, err
	}
	env.closers = append(env.closers, func() { _ = env.GW.Close() })
	env.Roots = x509.NewCertPool()
	if !env.Roots.AppendCertsFromPEM(env.GW.CACertPEM()) {
		return nil, errors.New("the gateway's CA certificate does not parse")
	}
	return env, nil
}

// Close stops the gateway, the origins and the upstream.
func (env *Env) Close() {
	for i := len(env.closers) - 1; i >= 0; i-- {
		env.closers[i]()
	}
	env.closers = nil
}

// Hits returns how many requests the origins saw.
func (env *Env) Hits() int {
	env.mu.Lock()
	defer env.mu.Unlock()
	return len(env.hits)
}

// HitsOf returns how many requests for path the origins saw.
func (env *Env) HitsOf(path string) int {
	env.mu.Lock()
	defer env.mu.Unlock()
	n := 0
	for _, h := range env.hits {
		if strings.HasSuffix(h, " "+path) {
			n++
		}
	}
	return n
}

// TakeLogs returns the decisions logged since the last call.
func (env *Env) TakeLogs() []egress.Record {
	env.mu.Lock()
	defer env.mu.Unlock()
	l := env.logs
	env.logs = nil
	return l
}

// Expand substitutes the origins' ports for ${HTTP} and ${HTTPS}.
func (env *Env) Expand(s string) string {
	return strings.NewReplacer("${HTTP}", env.HTTPPort, "${HTTPS}", env.HTTPSPort).Replace(s)
}

// ProxyClient is an HTTP client using the gateway as its proxy and
// trusting the gateway's CA; sni, when set, is the TLS server name it
// sends instead of the URL's host.
func (env *Env) ProxyClient(follow bool, sni string) *http.Client {
	tr := &http.Transport{
		Proxy:             http.ProxyURL(&url.URL{Scheme: "http", Host: env.GW.ProxyAddr().String()}),
		TLSClientConfig:   &tls.Config{RootCAs: env.Roots, ServerName: sni},
		DisableKeepAlives: true,
	}
	c := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	if !follow {
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	}
	return c
}

// Raw writes raw to the proxy byte for byte and reads one response, whose
// body it reads whole. With tunnel set (host:port), it first opens a
// CONNECT tunnel there and starts TLS inside it (server name: tunnel's
// host, trusting the gateway's CA), and writes raw in the tunnel. A
// connection that ends without a response is an error.
func (env *Env) Raw(tunnel, raw string) (*http.Response, error) {
	conn, err := net.DialTimeout("tcp", env.GW.ProxyAddr().String(), 10*time.Second)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	var c net.Conn = conn
	if tunnel != "" {
		if _, err := fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", tunnel, tunnel); err != nil {
			return nil, err
		}
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		if err != nil {
			return nil, fmt.Errorf("CONNECT %s: %w", tunnel, err)
		}
		if resp.StatusCode != http.StatusOK {
			return readWhole(resp)
		}
		if br.Buffered() > 0 {
			return nil, fmt.Errorf("CONNECT %s: bytes after the response", tunnel)
		}
		host, _, _ := net.SplitHostPort(tunnel)
		tc := tls.Client(conn, &tls.Config{RootCAs: env.Roots, ServerName: host})
		if err := tc.Handshake(); err != nil {
			return nil, fmt.Errorf("TLS in the tunnel to %s: %w", tunnel, err)
		}
		c = tc
	}
	if _, err := io.WriteString(c, raw); err != nil {
		return nil, err
	}
	method, _, _ := strings.Cut(raw, " ")
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: method})
	if err != nil {
		return nil, fmt.Errorf("no response: %w", err)
	}
	if method == http.MethodConnect && resp.StatusCode/100 == 2 {
		resp.Body = http.NoBody // a tunnel, not a body
		return resp, nil
	}
	return readWhole(resp)
}

// readWhole reads resp's body into memory, so that it outlives the
// connection.
func readWhole(resp *http.Response) (*http.Response, error) {
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(b))
	return resp, err
}

// startUpstream runs a DNS server answering UpstreamRecords.
func (env *Env) startUpstream() (string, error) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		m.Authoritative = true // the zone's own server: empty answers are NODATA
		if len(r.Question) != 1 {
			m.Rcode = dns.RcodeFormatError
			_ = w.WriteMsg(m)
			return
		}
		q := r.Question[0]
		if v, ok := UpstreamRecords[strings.ToLower(q.Name)]; ok {
			a := netip.MustParseAddr(v)
			hdr := dns.RR_Header{Name: q.Name, Rrtype: q.Qtype, Class: dns.ClassINET, Ttl: 60}
			switch {
			case q.Qtype == dns.TypeA && a.Is4():
				m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: a.AsSlice()})
			case q.Qtype == dns.TypeAAAA && a.Is6():
				m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr, AAAA: a.AsSlice()})
			}
		} else {
			m.Rcode = dns.RcodeNameError
		}
		_ = w.WriteMsg(m)
	})}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go func() { _ = srv.ActivateAndServe() }()
	<-started
	env.closers = append(env.closers, func() { _ = srv.Shutdown() })
	return pc.LocalAddr().String(), nil
}

// UpstreamLookup resolves through the DNS server at addr.
func UpstreamLookup(addr string) egress.LookupFunc {
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", addr)
	}}
	return r.LookupNetIP
}

// Server is an HTTP or HTTPS server on loopback.
type Server struct {
	URL      string // scheme://127.0.0.1:port
	Listener net.Listener
	srv      *http.Server
	done     chan struct{}
}

// Serve serves h on a loopback port, over TLS when tc is not nil.
func Serve(h http.Handler, tc *tls.Config) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	o := &Server{Listener: ln, srv: &http.Server{Handler: h}, done: make(chan struct{}), URL: "http://" + ln.Addr().String()}
	serve := ln
	if tc != nil {
		serve = tls.NewListener(ln, tc)
		o.URL = "https://" + ln.Addr().String()
	}
	go func() {
		defer close(o.done)
		_ = o.srv.Serve(serve)
	}()
	return o, nil
}

// Close stops the server and ends its connections.
func (o *Server) Close() {
	_ = o.srv.Close()
	<-o.done
}

func portOf(a net.Addr) string {
	_, p, _ := net.SplitHostPort(a.String())
	return p
}

// Atoi is strconv.Atoi for ports known to be numbers.
func Atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}
