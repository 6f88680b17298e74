package egress

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/encoding/htmlindex"
	"golang.org/x/time/rate"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/value"
)

// Verdict is the outcome of one egress decision.
type Verdict string

// The verdicts.
const (
	Allow Verdict = "allow"
	Deny  Verdict = "deny"
)

// Record is one logged egress decision; it feeds the audit trail.
type Record struct {
	Time    time.Time `json:"time"`
	Job     string    `json:"job"`
	Via     string    `json:"via"` // "http" (proxied), "connect", "https" (inside a CONNECT), "dns", "client" (in-process), "socket", "gateway" (a count of refusals not logged)
	Host    string    `json:"host"`
	Port    int       `json:"port,omitempty"`
	Method  string    `json:"method,omitempty"` // the HTTP method, or the DNS query type
	Path    string    `json:"path,omitempty"`
	Addr    string    `json:"addr,omitempty"`   // the address dialled, when one was
	Remote  string    `json:"remote,omitempty"` // the client's address, at the proxy
	Verdict Verdict   `json:"verdict"`
	Reason  string    `json:"reason"`
}

// MaxRecordField bounds a Record's Path and Reason, which the request
// decides (a path of up to a MiB, a reason quoting it): a longer one is
// cut and ends in "...".
const MaxRecordField = 2048

// JSONSink returns a log function writing one JSON object per line to w;
// it is safe for concurrent use.
func JSONSink(w io.Writer) func(Record) {
	var mu sync.Mutex
	enc := json.NewEncoder(w)
	return func(r Record) {
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(r)
	}
}

// Defaults for the zero fields of a Config.
const (
	DefaultMaxRequestBytes  = 10 << 20
	DefaultMaxResponseBytes = 64 << 20
	DefaultDNSRate          = 20 // queries per second, per gateway
	DefaultDNSBurst         = 50
	DefaultCATTL            = 24 * time.Hour
	DefaultDialTimeout      = 10 * time.Second
	DefaultMaxConns         = 64 // proxy and socket connections served at once, per gateway
)

// maxHeldBodies bounds the request bodies a gateway holds in memory at
// once to check them (each up to MaxRequestBytes); a request whose body
// must be checked waits for one of them to be sent.
const maxHeldBodies = 4

// heldBodyTimeout bounds the reading of a body held to be checked: a
// client that sends one slowly would keep one of the gateway's few
// places for them (maxHeldBodies) from every other request. A variable
// for the tests.
var heldBodyTimeout = 30 * time.Second

// rewriteHeaders let a client ask a server, or a front end before it, to
// treat a request as another method, path or host than its request line
// and Host header say; a policy by method, path and host would mean
// nothing if they passed. Names are compared lower-cased with '_' read as
// '-': CGI, WSGI and Rack servers turn both into '_', so X_HTTP_METHOD
// reaches the application as X-HTTP-Method does.
var rewriteHeaders = map[string]string{
	"x-http-method-override": "method-override",
	"x-http-method":          "method-override",
	"x-method-override":      "method-override",
	"x-original-method":      "method-override",
	"x-original-url":         "path-override",
	"x-rewrite-url":          "path-override",
	"x-original-uri":         "path-override", // nginx auth_request's convention
	"x-envoy-original-path":  "path-override",
	"x-forwarded-uri":        "path-override",
	"x-forwarded-path":       "path-override",
	"x-forwarded-prefix":     "path-override",
	"x-forwarded-host":       "host-override",
	"x-forwarded-server":     "host-override",
	"x-original-host":        "host-override",
	"x-host":                 "host-override",
}

// rewriteHeader returns the first header of h that rewriteHeaders lists,
// in any spelling, or a Forwarded header naming a host, and what it
// overrides.
func rewriteHeader(h http.Header) (name, what string) {
	for k, vs := range h {
		norm := strings.ReplaceAll(strings.ToLower(k), "_", "-")
		if w, ok := rewriteHeaders[norm]; ok {
			return k, w
		}
		if norm == "forwarded" {
			for _, v := range vs {
				for _, f := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ';' }) {
					if n, _, _ := strings.Cut(strings.TrimSpace(f), "="); strings.EqualFold(strings.TrimSpace(n), "host") {
						return k, "host-override"
					}
				}
			}
		}
	}
	return "", ""
}

// methodParam reports whether a query or form body carries a _method
// field in any spelling a server reads as one: fields split on '&' or
// ';' (as Rack and older Python do), names percent-decoded with '+' as a
// space (invalid escapes kept, as PHP keeps them), cut at a NUL, leading
// spaces dropped, '.' and ' ' read as '_' and anything from a '[' on
// ignored (as PHP does), case ignored.
func methodParam(raw string) bool {
	for _, field := range strings.FieldsFunc(raw, func(r rune) bool { return r == '&' || r == ';' }) {
		name, _, _ := strings.Cut(field, "=")
		if isMethodField(name) || isMethodField(formUnescape(name)) {
			return true
		}
	}
	return false
}

// formUnescape decodes a form field's name as PHP does: '+' is a space,
// each valid %XX its byte, and an invalid escape is kept as it is (Go's
// decoder refuses the whole name instead); and as ASP.NET does, %uXXXX
// its character.
func formUnescape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '+':
			b.WriteByte(' ')
		case c == '%' && i+5 < len(s) && (s[i+1] == 'u' || s[i+1] == 'U') && isHex(s[i+2]) && isHex(s[i+3]) && isHex(s[i+4]) && isHex(s[i+5]):
			b.WriteRune(rune(unhex(s[i+2]))<<12 | rune(unhex(s[i+3]))<<8 | rune(unhex(s[i+4]))<<4 | rune(unhex(s[i+5])))
			i += 5
		case c == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]):
			b.WriteByte(unhex(s[i+1])<<4 | unhex(s[i+2]))
			i += 2
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

// fieldSeparators are what PHP turns into '_' in a field's name.
var fieldSeparators = strings.NewReplacer(".", "_", " ", "_")

// isMethodField reports whether a form field's name is _method (or
// Salesforce's _HttpMethod, or X-HTTP-Method-Override, which ASP.NET MVC
// reads from the form and the query too) in a spelling some server reads
// as it (see methodParam).
func isMethodField(name string) bool {
	// PHP registers names as C strings: a NUL ends one.
	name, _, _ = strings.Cut(name, "\x00")
	name = strings.TrimLeft(name, " ")
	if i := strings.IndexByte(name, '['); i >= 0 {
		name = name[:i]
	}
	name = fieldSeparators.Replace(name)
	return strings.EqualFold(name, "_method") || strings.EqualFold(name, "_httpmethod") ||
		strings.EqualFold(strings.ReplaceAll(name, "_", "-"), "x-http-method-override")
}

// hopHeaders are connection-scoped and never forwarded.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// engine is the policy machinery shared by the proxy, the resolver and
// the in-process client: one per gateway, hence per job or session.
type engine struct {
	job       string
	policy    *Policy
	res       resolver
	log       func(Record)
	maxReq    int64
	maxResp   int64
	transport *http.Transport
	dnsLimit  *rate.Limiter
	bodies    chan struct{} // bodies held in memory to be checked (maxHeldBodies)
	dialer    net.Dialer
}

func newEngine(cfg *Config) (*engine, error) {
	pol, err := NewPolicy(cfg.Rules)
	if err != nil {
		return nil, err
	}
	e := &engine{
		job:     cfg.Job,
		policy:  pol,
		res:     resolver{hosts: cfg.Hosts.clone(), lookup: cfg.Lookup},
		log:     cfg.Log,
		maxReq:  orDefault(cfg.MaxRequestBytes, DefaultMaxRequestBytes),
		maxResp: orDefault(cfg.MaxResponseBytes, DefaultMaxResponseBytes),
		dialer:  net.Dialer{Timeout: DefaultDialTimeout},
	}
	if e.res.lookup == nil {
		e.res.lookup = SystemLookup
	}
	if e.log == nil {
		e.log = func(Record) {}
	}
	dnsRate := cfg.DNSRate
	if dnsRate == 0 {
		dnsRate = DefaultDNSRate
	}
	e.bodies = make(chan struct{}, maxHeldBodies)
	e.dnsLimit = rate.NewLimiter(rate.Limit(dnsRate), int(orDefault(int64(cfg.DNSBurst), DefaultDNSBurst)))
	e.transport = &http.Transport{
		Proxy:                  nil, // never chain to the host's proxy settings
		DialContext:            e.dial,
		TLSClientConfig:        &tls.Config{RootCAs: cfg.OriginRoots, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:      false,
		MaxIdleConnsPerHost:    4,
		IdleConnTimeout:        60 * time.Second,
		TLSHandshakeTimeout:    10 * time.Second,
		ResponseHeaderTimeout:  60 * time.Second,
		MaxResponseHeaderBytes: maxHeadBytes, // as a request's (the transport's default is 10 MiB)
		DisableCompression:     true,         // pass bodies through as the origin sent them
	}
	return e, nil
}

func orDefault(v, def int64) int64 {
	if v <= 0 {
		return def
	}
	return v
}

func (e *engine) record(r Record) {
	r.Host, r.Method, r.Addr, r.Remote = printable(r.Host), printable(r.Method), printable(r.Addr), printable(r.Remote)
	r.Path, r.Reason = value.Clip(printable(r.Path), MaxRecordField), value.Clip(printable(r.Reason), MaxRecordField)
	r.Time = time.Now().UTC()
	r.Job = e.job
	e.log(r)
}

// printable writes what a request put into a record (a decoded path, a
// host that is not a name, a quoted header line) so that it shows as what
// it is: invalid UTF-8 as \xNN, and control characters, format characters
// (bidi overrides, zero-width marks) and line separators as \xNN or
// \uNNNN. A job cannot then begin a line of its own in a log or in
// Result.Decision, send a terminal escape to whoever reads them, or make
// a field read as something else; and nothing it sent is dropped.
func printable(s string) string {
	clean := true
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] >= 0x7f {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		c, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case c == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case c < 0x80 && !unicode.IsGraphic(c):
			fmt.Fprintf(&b, `\x%02x`, c)
		case !unicode.IsGraphic(c):
			fmt.Fprintf(&b, `\u%04x`, c)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// dial connects to a granted name through the addresses the resolver
// checked: the address dialled is the address checked, so a rebinding DNS
// answer between check and connect gains nothing.
func (e *engine) dial(ctx context.Context, network, address string) (net.Conn, error) {
	host, portStr, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	name, err := NormalizeHost(host)
	if err != nil {
		return nil, &airlock.Denied{Capability: "net", Detail: err.Error()}
	}
	if !e.policy.AllowsName(name) {
		return nil, &airlock.Denied{Capability: "net", Detail: "host " + name + " is not granted"}
	}
	if _, pinned := e.res.hosts[name]; !pinned && !e.policy.namesExactly(name) {
		// The job chose the labels under the wildcard, and the upstream
		// lookup carries them to the zone's name servers, as a query to
		// the resolver would: it takes the resolver's rate limit too.
		wctx, cancel := context.WithTimeout(ctx, DefaultDialTimeout)
		err := e.dnsLimit.Wait(wctx)
		cancel()
		if err != nil {
			return nil, &airlock.Denied{Capability: "net", Detail: "lookup rate limit exceeded: " + name + " is granted by a wildcard rule, and its lookups share the resolver's limit"}
		}
	}
	addrs, err := e.res.resolve(ctx, "ip", name)
	if err != nil {
		var pe policyError
		if errors.As(err, &pe) {
			return nil, &airlock.Denied{Capability: "net", Detail: err.Error()}
		}
		return nil, err
	}
	var errs []error
	for _, a := range addrs {
		c, err := e.dialer.DialContext(ctx, "tcp", net.JoinHostPort(a.String(), portStr))
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// target is where a request is going: the normalised host and the port.
type target struct {
	host string
	port int
}

func (t target) String() string { return net.JoinHostPort(t.host, strconv.Itoa(t.port)) }

// parseTarget splits a URL host or CONNECT authority, defaulting the port
// from the scheme.
func parseTarget(hostport, scheme string) (target, error) {
	host, portStr := hostport, ""
	if h, p, err := net.SplitHostPort(hostport); err == nil {
		host, portStr = h, p
	} else if strings.HasPrefix(hostport, "[") || strings.Count(hostport, ":") > 1 {
		return target{}, errorf("IP literal %q is never allowed", hostport)
	}
	name, err := NormalizeHost(host)
	if err != nil {
		return target{}, err
	}
	port := 0
	switch {
	case portStr != "":
		p, err := strconv.Atoi(portStr)
		if err != nil || p < 1 || p > 65535 {
			return target{}, errorf("bad port %q", portStr)
		}
		port = p
	case scheme == "https":
		port = 443
	case scheme == "http":
		port = 80
	default:
		return target{}, errorf("no port in %q", hostport)
	}
	return target{host: name, port: port}, nil
}

// checkRequest applies the policy to one HTTP request bound for t over
// scheme.
func (e *engine) checkRequest(r *http.Request, scheme string, t target) (ok bool, status int, reason string) {
	if h, what := rewriteHeader(r.Header); h != "" {
		return false, http.StatusForbidden, what + " header " + h + " is refused"
	}
	if r.URL != nil && methodParam(r.URL.RawQuery) {
		return false, http.StatusForbidden, "method-override parameter _method is refused"
	}
	// A front end that decodes the path before passing it on sends what
	// follows an encoded '?' as the query.
	if _, q, ok := strings.Cut(r.URL.Path, "?"); ok && methodParam(q) {
		return false, http.StatusForbidden, "method-override parameter _method after an encoded '?' in the path is refused"
	}
	if r.Header.Get("Upgrade") != "" || headerHasToken(r.Header, "Connection", "upgrade") || r.Header.Get("Http2-Settings") != "" {
		return false, http.StatusForbidden, "protocol upgrade is refused"
	}
	if r.Method == http.MethodConnect {
		return false, http.StatusForbidden, "CONNECT inside a tunnel is refused"
	}
	if reason := bodyRefused(r); reason != "" {
		return false, http.StatusForbidden, reason
	}
	if r.ContentLength > e.maxReq {
		return false, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body of %d bytes is over the cap of %d", r.ContentLength, e.maxReq)
	}
	// The path is checked as it will be sent: the request-target the
	// transport writes (see outbound), without its query.
	path, _, _ := strings.Cut(r.URL.RequestURI(), "?")
	if ok, reason := e.policy.Check(r.Method, scheme, t.host, t.port, path); !ok {
		return false, http.StatusForbidden, reason
	}
	// Last: a request refused on its face is refused before its body is
	// asked for (Expect: 100-continue).
	if status, reason := e.checkForm(r); reason != "" {
		return false, status, reason
	}
	return true, 0, ""
}

// checkForm refuses a body that carries a _method field in some
// server's reading of it: Rails, Laravel, Symfony, Spring and Express's
// method-override treat a POST with one as the method it names. A body is
// read as every server may read it: as a urlencoded form when its
// Content-Type says so (in Go's reading or PHP's, which cuts the type at
// the first ';', ',' or space), is missing (Rack parses such a POST as a
// form) or unreadable; as multipart for any multipart type (Rack parses
// multipart/mixed and multipart/related as forms); as JSON when the type
// contains "/json" or "+json" (Laravel makes such a body the request's
// input, where Symfony looks for _method). It is then read whole (within
// the request cap) before anything is sent, and handed on as read.
func (e *engine) checkForm(r *http.Request) (status int, reason string) {
	if r.Body == nil || r.Body == http.NoBody || RefusesBody(r.Method) {
		return 0, ""
	}
	sent := forwardedHeader(r.Header) // a Content-Type named in Connection is not sent
	if len(sent.Values("Content-Type")) > 1 {
		// Servers keep the first, the last, or join them: each would read
		// the body as something else.
		return http.StatusBadRequest, "a body with more than one Content-Type is refused"
	}
	ct := sent.Get("Content-Type")
	lower := strings.ToLower(ct)
	mt, params, err := mime.ParseMediaType(ct)
	php, _, _ := strings.Cut(lower, ";")
	if i := strings.IndexAny(php, ", "); i >= 0 {
		php = php[:i]
	}
	const urlencoded = "application/x-www-form-urlencoded"
	isForm := ct == "" || err != nil || mt == urlencoded || php == urlencoded
	isMultipart := strings.HasPrefix(mt, "multipart/") || strings.HasPrefix(php, "multipart/")
	isJSON := strings.Contains(lower, "/json") || strings.Contains(lower, "+json")
	if !isForm && !isMultipart && !isJSON {
		return 0, ""
	}
	if cs := foreignCharset(lower); cs != "" {
		return http.StatusForbidden, "a form body in charset " + strconv.Quote(cs) + " is refused (its fields cannot be checked)"
	}
	for _, v := range sent.Values("Content-Encoding") {
		for _, ce := range strings.Split(v, ",") {
			if ce = strings.TrimSpace(ce); ce != "" && !strings.EqualFold(ce, "identity") {
				return http.StatusForbidden, "a form body with Content-Encoding " + ce + " is refused (its fields cannot be checked)"
			}
		}
	}
	select {
	case e.bodies <- struct{}{}:
	case <-r.Context().Done():
		return http.StatusServiceUnavailable, "request ended while waiting to check its body"
	}
	release := sync.OnceFunc(func() { <-e.bodies })
	held := false // the body is handed on, and released when it is closed
	defer func() {
		if !held || status != 0 {
			release()
		}
	}()
	if d, ok := r.Body.(interface{ SetReadDeadline(time.Time) error }); ok {
		_ = d.SetReadDeadline(time.Now().Add(heldBodyTimeout))
		defer func() { _ = d.SetReadDeadline(time.Time{}) }()
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, e.maxReq+1))
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return http.StatusRequestTimeout, fmt.Sprintf("request body not complete within %s", heldBodyTimeout)
	}
	if err != nil {
		return http.StatusBadRequest, "reading the request body: " + err.Error()
	}
	if int64(len(body)) > e.maxReq {
		return http.StatusRequestEntityTooLarge, fmt.Sprintf("request body is over the cap of %d bytes", e.maxReq)
	}
	orig := r.Body
	r.Body = readCloser{bytes.NewReader(body), closerFunc(func() error {
		release()
		return orig.Close()
	})}
	held = true
	const found = "method-override field _method in the form body is refused"
	if isForm && methodParam(string(body)) {
		return http.StatusForbidden, found
	}
	if isJSON && jsonMethodKey(body) {
		return http.StatusForbidden, "method-override field _method in the JSON body is refused"
	}
	if !isMultipart {
		return 0, ""
	}
	// Every line of the body that reads as a part's header is looked at,
	// whatever the boundary: servers find the boundary and the parts
	// differently (PHP takes the first "boundary" anywhere in the
	// Content-Type, Rack the last).
	if partHeadersName(body) {
		return http.StatusForbidden, found
	}
	mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			return 0, ""
		}
		if err != nil {
			return http.StatusForbidden, "a multipart form body that cannot be read is refused (its fields cannot be checked): " + err.Error()
		}
		for _, v := range part.Header.Values("Content-Disposition") {
			if namesMethod(v) {
				return http.StatusForbidden, found
			}
		}
		for _, v := range part.Header.Values("Content-Id") {
			if isContentIDMethod(v) {
				return http.StatusForbidden, found
			}
		}
	}
}

// foreignCharset returns a charset the lower-cased Content-Type ct names
// (in any of its "charset=" parameters, however malformed the type) that
// does not write ASCII as ASCII, "" if none: a server that decodes a body
// in it (ASP.NET Core does a form's) may read fields the bytes do not
// show.
func foreignCharset(ct string) string {
	for at := 0; ; {
		i := strings.Index(ct[at:], "charset")
		if i < 0 {
			return ""
		}
		at += i + len("charset")
		v := strings.TrimLeft(ct[at:], " \t")
		if !strings.HasPrefix(v, "=") {
			continue
		}
		v = strings.TrimLeft(v[1:], " \t\"'")
		if j := strings.IndexAny(v, ";, \t\"'"); j >= 0 {
			v = v[:j]
		}
		// Every WHATWG encoding but these reads each ASCII byte as itself
		// and writes ASCII as ASCII, in any state: UTF-16 does neither,
		// ISO-2022-JP's escape sequences may split a name into bytes that
		// do not show it, and "replacement" stands for others of that kind
		// (ISO-2022-KR, HZ). A name the standard does not know (UTF-7,
		// UTF-32, EBCDIC) is refused too.
		enc, err := htmlindex.Get(v)
		if err != nil {
			return v
		}
		switch name, _ := htmlindex.Name(enc); name {
		case "utf-16be", "utf-16le", "iso-2022-jp", "replacement":
			return v
		}
	}
}

// partHeadersName reports whether body holds, in any reading of a part's
// head, a Content-Disposition naming _method or a Content-ID that is
// _method (Rack names a part by its Content-ID when it has no name):
// every line that reads as such a header (with the lines folded onto
// it), and, as Rack reads a head, every "Content-Disposition:" anywhere,
// up to the next ':' or the end of the head, and every "Content-ID:"
// anywhere, up to the end of its line.
func partHeadersName(body []byte) bool {
	const maxContentID = 256
	text := string(body)
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		parts := []string{strings.TrimRight(lines[i], "\r")}
		for i+1 < len(lines) && strings.IndexAny(lines[i+1], " \t") == 0 { // folded onto it
			i++
			parts = append(parts, strings.TrimSpace(lines[i]))
		}
		line := strings.Join(parts, " ") // joined once: a body of folds costs no quadratic time
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch strings.ToLower(strings.TrimSpace(name)) {
		case "content-disposition":
			if namesMethod(value) {
				return true
			}
		case "content-id":
			if isContentIDMethod(value) {
				return true
			}
		}
	}
	// Lower-cased byte for byte (ASCII only), so that an index in lower is
	// the same in text: strings.ToLower changes the length of invalid UTF-8
	// and of letters such as U+0130.
	lowered := []byte(text)
	for i, c := range lowered {
		if 'A' <= c && c <= 'Z' {
			lowered[i] = c + 'a' - 'A'
		}
	}
	lower := string(lowered)
	for _, h := range []string{"content-disposition", "content-id"} {
		for at := 0; ; {
			i := strings.Index(lower[at:], h)
			if i < 0 {
				break
			}
			at += i + len(h)
			rest := strings.TrimLeft(text[at:], " \t")
			if !strings.HasPrefix(rest, ":") {
				continue
			}
			rest = rest[1:]
			if h == "content-id" {
				// Rack's \s* after the colon crosses lines. A value that
				// names _method is short: only the start of a long one is
				// looked at (at worst a refusal), so that many headers on
				// one long line cost no quadratic time.
				v := strings.TrimLeft(rest, " \t\r\n")
				line, _, _ := strings.Cut(v[:min(len(v), maxContentID)], "\n")
				if isContentIDMethod(strings.TrimRight(line, "\r")) {
					return true
				}
				continue
			}
			if j := strings.IndexByte(rest, ':'); j >= 0 {
				rest = rest[:j]
			}
			if j := strings.Index(rest, "\r\n\r\n"); j >= 0 {
				rest = rest[:j]
			}
			if j := strings.Index(rest, "\n\n"); j >= 0 {
				rest = rest[:j]
			}
			if namesMethod(strings.NewReplacer("\r", " ", "\n", " ").Replace(rest)) {
				return true
			}
		}
	}
	return false
}

// namesMethod reports whether a Content-Disposition value names _method
// in any reading: any disposition type, any "name" or "name*" parameter
// (not only the one a strict parse keeps), quoted or not, percent- or
// RFC 2047-encoded or not.
func namesMethod(disposition string) bool {
	for _, param := range strings.FieldsFunc(disposition, func(r rune) bool { return r == ';' || r == ',' }) {
		k, v, ok := strings.Cut(param, "=")
		k = strings.ToLower(strings.TrimSpace(k))
		if !ok || (k != "name" && !strings.HasPrefix(k, "name*")) {
			continue
		}
		v = strings.Trim(strings.TrimSpace(v), "\"'")
		v = strings.ReplaceAll(v, "\\", "")
		if k != "name" {
			if _, rest, ok := strings.Cut(v, "''"); ok {
				v = rest // RFC 2231: charset'language'value
			}
		}
		if isMethodField(v) {
			return true
		}
		if dec, err := url.PathUnescape(v); err == nil && isMethodField(dec) {
			return true
		}
		if strings.Contains(v, "=?") {
			// Apache Commons FileUpload (in Tomcat too) decodes RFC 2047
			// encoded words in every parameter; one that cannot be decoded
			// here is refused as if it were the field.
			dec, err := wordDecoder.DecodeHeader(v)
			if err != nil || isMethodField(dec) {
				return true
			}
		}
	}
	return false
}

// wordDecoder decodes RFC 2047 encoded words in any charset the WHATWG
// encoding standard names.
var wordDecoder = &mime.WordDecoder{CharsetReader: func(charset string, in io.Reader) (io.Reader, error) {
	enc, err := htmlindex.Get(charset)
	if err != nil {
		return nil, err
	}
	return enc.NewDecoder().Reader(in), nil
}}

func isContentIDMethod(v string) bool {
	v = strings.TrimSpace(v)
	return isMethodField(v) || isMethodField(strings.Trim(v, "<>"))
}

// jsonMethodKey reports whether body is a JSON object with a top-level
// key that is _method (keys unescaped; every occurrence of a repeated key
// looked at). A body that is not JSON has no keys to any server.
func jsonMethodKey(body []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return false
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		if key, ok := tok.(string); ok && isMethodField(key) {
			return true
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return false
		}
	}
	return false
}

// readCloser reads a body already read into memory; closing it closes
// the original.
type readCloser struct {
	io.Reader
	io.Closer
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// RefusesBody reports whether a request with method may not carry a body:
// GET, HEAD and OPTIONS (safe methods whose content has no defined
// meaning, RFC 9110 section 9.3), TRACE and CONNECT (which have none). A
// rule granting GET or OPTIONS grants reading; a body would make it a
// channel for writing.
func RefusesBody(method string) bool {
	switch strings.ToUpper(method) {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodConnect:
		return true
	}
	return false
}

// bodyRefused says why r may not be sent ("" if it may): a body (a
// non-zero Content-Length, any Transfer-Encoding, or a body of unknown
// length) on a method that has none.
func bodyRefused(r *http.Request) string {
	if !RefusesBody(r.Method) {
		return ""
	}
	switch {
	case len(r.TransferEncoding) > 0:
		return fmt.Sprintf("a %s request may not carry a body (Transfer-Encoding %s)", r.Method, strings.Join(r.TransferEncoding, ", "))
	case r.ContentLength > 0:
		return fmt.Sprintf("a %s request may not carry a body (Content-Length %d)", r.Method, r.ContentLength)
	case r.Body != nil && r.Body != http.NoBody:
		return fmt.Sprintf("a %s request may not carry a body", r.Method)
	}
	return ""
}

func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, f := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(f), token) {
				return true
			}
		}
	}
	return false
}

// outbound builds the request sent to the origin: absolute URL on the
// checked target, hop-by-hop headers removed, body capped.
func (e *engine) outbound(ctx context.Context, r *http.Request, scheme string, t target) *http.Request {
	out := r.Clone(ctx)
	out.RequestURI = ""
	u := *r.URL
	u.Scheme, u.Host, u.User = scheme, hostPort(t, scheme), nil
	out.URL = &u
	out.Host = u.Host
	out.Header = forwardedHeader(r.Header)
	if r.Body != nil && r.Body != http.NoBody {
		out.Body = &cappedReader{r: r.Body, left: e.maxReq, what: "request body"}
	}
	out.Close = false
	return out
}

// forwardedHeader is the part of h sent on to the origin: without the
// headers the Connection header names, hop-by-hop headers and Proxy-*
// headers.
// Checks of what the origin will read look at this, not at h.
func forwardedHeader(h http.Header) http.Header {
	out := h.Clone()
	for _, c := range h.Values("Connection") {
		for _, f := range strings.Split(c, ",") {
			out.Del(strings.TrimSpace(f))
		}
	}
	for _, name := range hopHeaders {
		out.Del(name)
	}
	for name := range out {
		if len(name) > 6 && strings.EqualFold(name[:6], "proxy-") {
			delete(out, name) // meant for the proxy, credentials among them
		}
	}
	return out
}

func hostPort(t target, scheme string) string {
	if (scheme == "http" && t.port == 80) || (scheme == "https" && t.port == 443) {
		return t.host
	}
	return t.String()
}

// errTooLarge is returned by a capped body past its cap.
type errTooLarge struct{ what string }

func (e errTooLarge) Error() string { return e.what + " exceeds the egress cap" }

type cappedReader struct {
	r    io.ReadCloser
	left int64
	what string
}

func (c *cappedReader) Read(p []byte) (int, error) {
	if c.left < 0 {
		return 0, errTooLarge{c.what}
	}
	if int64(len(p)) > c.left+1 {
		p = p[:c.left+1]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	if c.left < 0 {
		return n - int(-c.left), errTooLarge{c.what}
	}
	return n, err
}

func (c *cappedReader) Close() error { return c.r.Close() }

// roundTrip checks and sends one request to the origin, logging the
// decision; via says which door it came through.
func (e *engine) roundTrip(r *http.Request, scheme string, t target, via string) (*http.Response, int, error) {
	rec := Record{Via: via, Host: t.host, Port: t.port, Method: r.Method, Path: r.URL.Path, Remote: r.RemoteAddr}
	if ok, status, reason := e.checkRequest(r, scheme, t); !ok {
		rec.Verdict, rec.Reason = Deny, reason
		e.record(rec)
		return nil, status, &airlock.Denied{Capability: "net", Detail: reason}
	}
	var dialled string
	ctx := httptrace.WithClientTrace(r.Context(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
		dialled = i.Conn.RemoteAddr().String()
	}})
	resp, err := e.transport.RoundTrip(e.outbound(ctx, r, scheme, t))
	rec.Addr = dialled
	if err != nil {
		var d *airlock.Denied
		rec.Verdict, rec.Reason = Deny, err.Error()
		if errors.As(err, &d) {
			rec.Reason = d.Detail
			e.record(rec)
			return nil, http.StatusForbidden, d
		}
		var tl errTooLarge
		if errors.As(err, &tl) {
			e.record(rec)
			return nil, http.StatusRequestEntityTooLarge, &airlock.Denied{Capability: "net", Detail: tl.Error()}
		}
		rec.Reason = "upstream error: " + err.Error()
		e.record(rec)
		return nil, http.StatusBadGateway, fmt.Errorf("forwarding to %s: %w", t, err)
	}
	if resp.ContentLength > e.maxResp {
		resp.Body.Close()
		rec.Verdict, rec.Reason = Deny, fmt.Sprintf("response of %d bytes is over the cap of %d", resp.ContentLength, e.maxResp)
		e.record(rec)
		return nil, http.StatusBadGateway, &airlock.Denied{Capability: "net", Detail: rec.Reason}
	}
	resp.Body = &cappedReader{r: resp.Body, left: e.maxResp, what: "response body"}
	rec.Verdict, rec.Reason = Allow, fmt.Sprintf("status %d", resp.StatusCode)
	e.record(rec)
	return resp, resp.StatusCode, nil
}
