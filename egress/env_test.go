package egress

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/miekg/dns"

	"github.com/airlock-sandbox/airlock"
)

// testEnv is a real proxy and resolver on loopback, in front of real HTTP
// and HTTPS origins on loopback and a real upstream DNS server. The names
// are those the corpus README describes.
type testEnv struct {
	gw        *Gateway
	http      *httptest.Server
	https     *httptest.Server
	httpPort  string
	httpsPort string
	upstream  string
	roots     *x509.CertPool // verifies the gateway's CA

	mu   sync.Mutex
	hits []string // "METHOD host path" as the origins saw them
	logs []Record
}

func (env *testEnv) hitCount() int {
	env.mu.Lock()
	defer env.mu.Unlock()
	return len(env.hits)
}

func (env *testEnv) hitsOf(path string) int {
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

func (env *testEnv) takeLogs() []Record {
	env.mu.Lock()
	defer env.mu.Unlock()
	l := env.logs
	env.logs = nil
	return l
}

// expand substitutes the origins' ports into a case's strings.
func (env *testEnv) expand(s string) string {
	return strings.NewReplacer("${HTTP}", env.httpPort, "${HTTPS}", env.httpsPort).Replace(s)
}

// upstreamRecords is what the upstream DNS server answers.
var upstreamRecords = map[string]string{
	"meta.test.":    "169.254.169.254",
	"v6meta.test.":  "fd00:ec2::254",
	"rebind.test.":  "127.0.0.1",
	"nat64.test.":   "64:ff9b::7f00:1",
	"mapped.test.":  "::ffff:127.0.0.1",
	"public.test.":  "93.184.215.14",
	"private.test.": "10.1.2.3",
}

// startUpstream runs a DNS server answering upstreamRecords and counting
// the names it was asked.
func startUpstream(t testing.TB) (addr string, asked func() []string) {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var names []string
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		m.Authoritative = true // the zone's own server: empty answers are NODATA
		q := r.Question[0]
		mu.Lock()
		names = append(names, q.Name)
		mu.Unlock()
		if v, ok := upstreamRecords[strings.ToLower(q.Name)]; ok {
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
	t.Cleanup(func() { _ = srv.Shutdown() })
	return pc.LocalAddr().String(), func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), names...)
	}
}

// upstreamLookup resolves through the DNS server at addr.
func upstreamLookup(addr string) LookupFunc {
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", addr)
	}}
	return r.LookupNetIP
}

// newTestEnv starts the origins, the upstream and a gateway with the
// corpus's rules; extra adjusts the config before the start.
func newTestEnv(t testing.TB, extra func(*Config)) *testEnv {
	t.Helper()
	env := &testEnv{}
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
	env.http = httptest.NewServer(origin)
	t.Cleanup(env.http.Close)
	originCA, err := newCA("test origin", DefaultCATTL)
	if err != nil {
		t.Fatal(err)
	}
	env.https = httptest.NewUnstartedServer(origin)
	env.https.TLS = &tls.Config{GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
		return originCA.leaf(h.ServerName)
	}}
	env.https.StartTLS()
	t.Cleanup(env.https.Close)
	env.httpPort = portOf(env.http.Listener.Addr())
	env.httpsPort = portOf(env.https.Listener.Addr())
	env.upstream, _ = startUpstream(t)

	ports := []int{atoi(env.httpPort), atoi(env.httpsPort)}
	hosts := Hosts{}
	for _, n := range []string{"origin.test", "post.test", "a.wild.test", "wild.test", "evil.test", "x.origin.test", "evilorigin.test", "bücher.test"} {
		if err := hosts.Add(n, netip.MustParseAddr("127.0.0.1")); err != nil {
			t.Fatal(err)
		}
	}
	roots := x509.NewCertPool()
	roots.AddCert(originCA.cert)
	cfg := Config{
		Job: "test-job",
		Rules: []airlock.NetRule{
			{Host: "origin.test", Ports: ports},
			{Host: "post.test", Methods: []string{"POST"}, Ports: ports},
			{Host: "*.wild.test", Ports: ports},
			{Host: "meta.test"}, {Host: "v6meta.test"},
			{Host: "rebind.test", Ports: ports}, {Host: "nat64.test", Ports: ports},
			{Host: "mapped.test", Ports: ports}, {Host: "public.test"}, {Host: "private.test"},
			{Host: "Bücher.test", Ports: ports},
		},
		Hosts:       hosts,
		Lookup:      upstreamLookup(env.upstream),
		Listen:      "127.0.0.1:0",
		DNS:         "127.0.0.1:0",
		OriginRoots: roots,
		DNSRate:     1000,
		DNSBurst:    1000,
		Log: func(r Record) {
			env.mu.Lock()
			env.logs = append(env.logs, r)
			env.mu.Unlock()
		},
	}
	if extra != nil {
		extra(&cfg)
	}
	gw, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gw.Close() })
	env.gw = gw
	env.roots = x509.NewCertPool()
	if !env.roots.AppendCertsFromPEM(gw.CACertPEM()) {
		t.Fatal("gateway CA PEM does not parse")
	}
	return env
}

func portOf(a net.Addr) string {
	_, p, _ := net.SplitHostPort(a.String())
	return p
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// proxyClient is an HTTP client using the gateway as its proxy, trusting
// the gateway's CA.
func (env *testEnv) proxyClient(follow bool, sni string) *http.Client {
	tr := &http.Transport{
		Proxy:             http.ProxyURL(mustURL("http://" + env.gw.ProxyAddr().String())),
		TLSClientConfig:   &tls.Config{RootCAs: env.roots, ServerName: sni},
		DisableKeepAlives: true,
	}
	c := &http.Client{Transport: tr}
	if !follow {
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	}
	return c
}
