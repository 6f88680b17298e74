package image

import (
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
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/airlock-sandbox/airlock/egress"
)

// A pull goes where its registry sends it: registries keep their blobs
// on a CDN and redirect there. What a registry (or a host it redirects to)
// cannot do is turn the pull against the network the store runs in:
//
//   - no connection reaches an address egress.Forbidden refuses (loopback,
//     private, CGNAT, link-local, the cloud metadata services, unspecified,
//     multicast, and the IPv6 forms that embed an IPv4 address: NAT64,
//     6to4, Teredo...), unless the registry named in the reference is
//     itself at an address of that class (a
//     registry on loopback may send its blobs to another port of
//     loopback). Each address is checked as it is dialled, after the name
//     was resolved, so a name that resolves to one of them (or starts to,
//     between two requests) is refused too;
//   - a registry spoken to over https is never followed to http;
//   - no credential goes to another host than the registry and the token
//     services the registry itself named in its challenges: a Basic
//     header, or a token the file holds or a token service issued, is
//     taken off a request to any other host, and such a host is never
//     posted to (the OAuth2 form carries the refresh token).

// addrClass is the class of special-purpose address a belongs to, as
// egress.Forbidden (the egress gateway's rule) names it: "" for a global
// unicast address, else e.g. "loopback address", "private address",
// "metadata service address", "6to4 address". An IPv4 address written as
// IPv4-mapped IPv6 is of its IPv4 address's class.
func addrClass(a netip.Addr) string {
	reason, bad := egress.Forbidden(a)
	if !bad {
		return ""
	}
	return strings.TrimSuffix(reason, " (IPv4-mapped)")
}

// errReach marks a request a pull refused to make: the registry's fault
// (the image's, for the store's errors: Invalid).
var errReach = errors.New("refused to follow the registry")

// pullRoots, when set, replaces the system's certificate roots of pulls
// (for tests, whose registries have their own).
var pullRoots *x509.CertPool

// reach is what one pull may connect to: global unicast addresses, and
// those of the classes its registry is at.
type reach struct {
	allowed map[string]bool
	// proxies are the proxies (host:port) the environment names, dialled
	// without a check: the operator's, and the target behind one is
	// checked by the request, not by the dial.
	mu      sync.Mutex
	proxies map[string]bool
}

// newReach looks up where the registry is: an IP address it is named by,
// or every address its name resolves to now.
func newReach(ctx context.Context, reg name.Registry) *reach {
	r := &reach{allowed: map[string]bool{}, proxies: map[string]bool{}}
	host := hostOnly(reg.RegistryStr())
	if a, err := netip.ParseAddr(host); err == nil {
		r.allowed[addrClass(a)] = true
		return r
	}
	addrs, _ := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	for _, a := range addrs {
		r.allowed[addrClass(a)] = true
	}
	return r
}

// check refuses an address the pull may not reach.
func (r *reach) check(a netip.Addr) error {
	if c := addrClass(a); c != "" && !r.allowed[c] {
		return fmt.Errorf("%w to %s, a %s (the registry is not at one)", errReach, a.WithZone("").Unmap(), c)
	}
	return nil
}

// control is the dialer's check of the address it is about to connect
// to, resolved.
func (r *reach) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w to %q", errReach, address)
	}
	return r.check(ap.Addr())
}

// transport is an HTTP transport that dials only where r allows.
func (r *reach) transport() *http.Transport {
	base, _ := remote.DefaultTransport.(*http.Transport)
	var t *http.Transport
	if base != nil {
		t = base.Clone()
	} else {
		t = http.DefaultTransport.(*http.Transport).Clone()
	}
	checked := &net.Dialer{Timeout: dialTimeout, KeepAlive: dialTimeout, Control: r.control}
	plain := &net.Dialer{Timeout: dialTimeout, KeepAlive: dialTimeout}
	proxy := t.Proxy
	t.Proxy = func(req *http.Request) (*url.URL, error) {
		if proxy == nil {
			return nil, nil
		}
		u, err := proxy(req)
		if u != nil {
			r.mu.Lock()
			r.proxies[hostPort(u.Host, u.Scheme)] = true
			r.mu.Unlock()
		}
		return u, err
	}
	t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		r.mu.Lock()
		isProxy := r.proxies[addr]
		r.mu.Unlock()
		if isProxy {
			return plain.DialContext(ctx, network, addr)
		}
		return checked.DialContext(ctx, network, addr)
	}
	if pullRoots != nil {
		t.TLSClientConfig = &tls.Config{RootCAs: pullRoots, MinVersion: tls.VersionTLS12}
	}
	return t
}

// dialTimeout is go-containerregistry's own transport's.
const dialTimeout = 30 * time.Second

// hostOnly is host without its port or brackets.
func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]")
}

// hostPort is host with the scheme's port when it names none, lower-case.
func hostPort(host, scheme string) string {
	host = strings.ToLower(host)
	if _, _, err := net.SplitHostPort(host); err == nil {
		return host
	}
	port := "443"
	if scheme == "http" {
		port = "80"
	}
	return net.JoinHostPort(hostOnly(host), port)
}

// pullPolicy is the request side of the rules above, for credWatch.
type pullPolicy struct {
	reach    *reach
	registry string // the registry's host, as the reference names it
	secure   bool   // spoken to over https: never followed to http

	mu      sync.Mutex
	realms  map[string]bool // host:port of token services the registry named
	secrets map[string]bool // tokens and passwords that stay with the registry
}

func newPullPolicy(ctx context.Context, r name.Reference) *pullPolicy {
	reg := r.Context().Registry
	return &pullPolicy{
		reach:    newReach(ctx, reg),
		registry: reg.RegistryStr(),
		secure:   reg.Scheme() == "https",
		realms:   map[string]bool{},
		secrets:  map[string]bool{},
	}
}

// secret remembers values that go to the registry and its token services
// only.
func (p *pullPolicy) secret(vals ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, v := range vals {
		if v = strings.TrimSpace(v); v != "" {
			p.secrets[v] = true
		}
	}
}

// isRegistry reports whether u is the registry's own host.
func (p *pullPolicy) isRegistry(u *url.URL) bool {
	return hostPort(u.Host, u.Scheme) == hostPort(p.registry, u.Scheme)
}

// trusted reports whether u is the registry or a token service it named.
func (p *pullPolicy) trusted(u *url.URL) bool {
	if p.isRegistry(u) {
		return true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.realms[hostPort(u.Host, u.Scheme)]
}

// request checks a request before it is sent, and returns it, or a copy
// without the credentials it must not carry.
func (p *pullPolicy) request(r *http.Request) (*http.Request, error) {
	if p.secure && r.URL.Scheme != "https" {
		return nil, fmt.Errorf("%w to %s: not https, and the registry is spoken to over https", errReach, redactURL(r.URL))
	}
	// Behind a proxy the dial is to the proxy: an address in the URL is
	// checked here too.
	if a, err := netip.ParseAddr(hostOnly(r.URL.Host)); err == nil {
		if err := p.reach.check(a); err != nil {
			return nil, err
		}
	}
	h := r.Header.Get("Authorization")
	scheme, v, _ := strings.Cut(h, " ")
	v = strings.TrimSpace(v)
	if p.trusted(r.URL) {
		p.secret(v)
		return r, nil
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return nil, fmt.Errorf("%w to %s with a %s: only the registry and its token services are sent anything", errReach, redactURL(r.URL), r.Method)
	}
	if h == "" {
		return r, nil
	}
	p.mu.Lock()
	keep := strings.EqualFold(scheme, "bearer") && !p.secrets[v]
	p.mu.Unlock()
	if keep {
		return r, nil // a token this host's own token service gave
	}
	r = r.Clone(r.Context())
	r.Header.Del("Authorization")
	return r, nil
}

// response learns, from the registry's challenges, which token services
// it uses, and from a token service's answer, the tokens it issued.
func (p *pullPolicy) response(r *http.Request, resp *http.Response, tokens []string) {
	if p.isRegistry(r.URL) {
		for _, h := range resp.Header.Values("WWW-Authenticate") {
			for _, m := range realmRE().FindAllStringSubmatch(h, -1) {
				if u, err := url.Parse(m[1] + m[2]); err == nil && u.Host != "" {
					p.mu.Lock()
					p.realms[hostPort(u.Host, u.Scheme)] = true
					p.mu.Unlock()
				}
			}
		}
	}
	if p.trusted(r.URL) {
		p.secret(tokens...)
	}
}

// redactURL is u without its query (a CDN's signed URL carries one).
func redactURL(u *url.URL) string {
	c := *u
	c.RawQuery, c.Fragment, c.User = "", "", nil
	return c.String()
}

// realmRE finds the realm parameters of a WWW-Authenticate header, quoted
// or not.
var realmRE = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`(?i)(?:^|[\s,])realm\s*=\s*(?:"([^"]*)"|([^\s,"]+))`)
})

// reachRefusal makes go-containerregistry's own refusal of a redirect to
// an internal address literal (its "SSRF protection") one of the pull's.
func reachRefusal(err error) error {
	if err == nil || errors.Is(err, errReach) || !strings.Contains(err.Error(), "SSRF protection") {
		return err
	}
	return &reachError{err}
}

type reachError struct{ err error }

func (e *reachError) Error() string   { return errReach.Error() + ": " + e.err.Error() }
func (e *reachError) Unwrap() []error { return []error{errReach, e.err} }

// stallWindow and stallMin bound a registry (or a host it redirects to)
// that stops sending: a request whose answer's headers do not come within
// stallWindow, or whose body sends less than stallMin bytes in any
// stallWindow spent waiting for it, fails. Only time spent waiting on the
// network counts, not the unpacker's. A pull's other bound is its
// caller's context.
var stallWindow = 30 * time.Second

const stallMin = 32 << 10

// errStalled marks a request that stallGuard ended.
var errStalled = errors.New("stalled")

// stallGuard ends a request whose answer stalls (see stallWindow).
type stallGuard struct{ inner http.RoundTripper }

func (g stallGuard) RoundTrip(r *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancelCause(r.Context())
	stalled := fmt.Errorf("%w: %s sent less than %d bytes in %s", errStalled, hostOnly(r.URL.Host), stallMin, stallWindow)
	t := time.AfterFunc(stallWindow, func() { cancel(stalled) })
	resp, err := g.inner.RoundTrip(r.WithContext(ctx))
	t.Stop()
	if err != nil {
		if context.Cause(ctx) == stalled {
			err = stalled
		}
		cancel(nil)
		return nil, err
	}
	resp.Body = &stallBody{rc: resp.Body, ctx: ctx, cancel: cancel, stalled: stalled}
	return resp, nil
}

// stallBody fails once its reader waited stallWindow in all for less
// than stallMin bytes.
type stallBody struct {
	rc      io.ReadCloser
	ctx     context.Context
	cancel  context.CancelCauseFunc
	stalled error
	waited  time.Duration
	got     int64
}

func (b *stallBody) Read(p []byte) (int, error) {
	if context.Cause(b.ctx) == b.stalled {
		return 0, b.stalled
	}
	start := time.Now()
	t := time.AfterFunc(stallWindow-b.waited, func() { b.cancel(b.stalled) })
	n, err := b.rc.Read(p)
	t.Stop()
	b.waited += time.Since(start)
	b.got += int64(n)
	switch {
	case err != nil && context.Cause(b.ctx) == b.stalled:
		err = b.stalled
	case b.got >= stallMin:
		b.waited, b.got = 0, 0
	case b.waited >= stallWindow && err == nil:
		b.cancel(b.stalled)
		err = b.stalled
	}
	return n, err
}

func (b *stallBody) Close() error {
	err := b.rc.Close()
	b.cancel(nil)
	return err
}
