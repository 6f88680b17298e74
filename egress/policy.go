package egress

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/jobs"
	"github.com/airlock-sandbox/airlock/internal/netname"
	"github.com/airlock-sandbox/airlock/internal/value"
)

// AnyMethod in a rule's methods allows every HTTP method.
const AnyMethod = "*"

// Default methods and ports of a rule that lists none (see airlock.NetRule):
// 80 and 443 for a rule naming no scheme, the scheme's own port for one
// that does.
var (
	defaultMethods = []string{"GET", "HEAD"}
	defaultPorts   = []int{80, 443}
)

// Policy decides which hosts, schemes, ports, methods and paths a job may
// reach. It is built once from the job's grants.net rules and is safe for
// concurrent use.
type Policy struct {
	rules []rule
}

type rule struct {
	host     string // normalised A-label form, without the "*." prefix
	wildcard bool   // "*.host": proper subdomains of host only
	scheme   string // "http", "https", or "" for both
	methods  []string
	ports    []int
	paths    []string // nil: every path
}

// NewPolicy compiles rules. A rule whose host is not a DNS name (an IP
// literal in any spelling, a URL, a name with a port) is an
// *airlock.InvalidJob naming grants.net: addresses are never granted by
// rule, only pinned by the operator (see [Hosts]).
func NewPolicy(rules []airlock.NetRule) (*Policy, error) {
	p := &Policy{rules: make([]rule, 0, len(rules))}
	for i, r := range rules {
		name, wildcard, err := netname.Rule(r.Host)
		if err != nil {
			return nil, jobs.Invalid("grants.net", "rule %d (%q): %s", i, r.Host, err)
		}
		ru := rule{host: name, wildcard: wildcard, scheme: r.Scheme, methods: defaultMethods, ports: defaultPorts}
		switch r.Scheme {
		case "":
		case "http":
			ru.ports = []int{80}
		case "https":
			ru.ports = []int{443}
		default:
			return nil, jobs.Invalid("grants.net", "rule %d: scheme %q (want http, https or none for both)", i, r.Scheme)
		}
		if len(r.Methods) > 0 {
			ru.methods = make([]string, len(r.Methods))
			for j, m := range r.Methods {
				m = strings.ToUpper(strings.TrimSpace(m))
				if m == "" || (m != AnyMethod && !netname.IsToken(m)) {
					return nil, jobs.Invalid("grants.net", "rule %d: method %q is not an HTTP method", i, r.Methods[j])
				}
				ru.methods[j] = m
			}
		}
		if len(r.Ports) > 0 {
			for _, port := range r.Ports {
				if port < 1 || port > 65535 {
					return nil, jobs.Invalid("grants.net", "rule %d: port %d out of range", i, port)
				}
			}
			ru.ports = slices.Clone(r.Ports)
		}
		for _, path := range r.Paths {
			if err := value.CheckPathPattern(path); err != nil {
				return nil, jobs.Invalid("grants.net", "rule %d: path %q: %s", i, path, err)
			}
		}
		if r.Paths != nil {
			ru.paths = slices.Clone(r.Paths)
		}
		p.rules = append(p.rules, ru)
	}
	return p, nil
}

// Empty reports whether the policy allows nothing.
func (p *Policy) Empty() bool { return len(p.rules) == 0 }

// AllowsName reports whether some rule names host (at any method or port):
// the resolver answers only such names.
func (p *Policy) AllowsName(host string) bool {
	name, err := NormalizeHost(host)
	if err != nil {
		return false
	}
	for i := range p.rules {
		if p.rules[i].matches(name) {
			return true
		}
	}
	return false
}

// namesExactly reports whether a rule names the normalised name itself,
// not only through a wildcard.
func (p *Policy) namesExactly(name string) bool {
	for i := range p.rules {
		if !p.rules[i].wildcard && p.rules[i].host == name {
			return true
		}
	}
	return false
}

// Check decides whether method may be used on host:port over scheme
// ("http" or "https") at path: the request's path as sent, still
// percent-encoded, without its query. host may be in any spelling a client
// sends (upper case, trailing dot, U-labels); IP literals are refused
// whatever the rules say. The reason explains a refusal, or names the
// rule that allowed.
func (p *Policy) Check(method, scheme, host string, port int, path string) (ok bool, reason string) {
	name, err := NormalizeHost(host)
	if err != nil {
		return false, err.Error()
	}
	method = strings.ToUpper(method)
	// How far the closest rule got: host, scheme, port, method; its path
	// is the last check.
	stage, pathReason := 0, ""
	clean, pathErr := "", error(nil)
	cleaned := false
	for i := range p.rules {
		r := &p.rules[i]
		if !r.matches(name) {
			continue
		}
		stage = max(stage, 1)
		if r.scheme != "" && r.scheme != scheme {
			continue
		}
		stage = max(stage, 2)
		if !slices.Contains(r.ports, port) {
			continue
		}
		stage = max(stage, 3)
		if !slices.Contains(r.methods, method) && !slices.Contains(r.methods, AnyMethod) {
			continue
		}
		stage = 4
		if r.paths == nil {
			return true, "allowed by rule " + r.String()
		}
		if !cleaned {
			clean, pathErr = requestPath(path)
			cleaned = true
		}
		if pathErr != nil {
			pathReason = pathErr.Error()
			continue
		}
		if r.matchesPath(clean) {
			return true, "allowed by rule " + r.String()
		}
		if pathReason == "" {
			pathReason = fmt.Sprintf("path %s is not granted for %s on %s", clean, method, name)
		}
	}
	switch stage {
	case 0:
		return false, "host " + name + " is not granted"
	case 1:
		return false, "scheme " + scheme + " is not granted for " + name
	case 2:
		return false, fmt.Sprintf("port %d is not granted for %s over %s", port, name, scheme)
	case 3:
		return false, "method " + method + " is not granted for " + name
	}
	return false, pathReason
}

// CheckHost decides whether some method may be used on host:port over
// scheme: the check for a CONNECT, before the requests inside it are
// visible. A rule's methods and paths are left to the check of each
// request.
func (p *Policy) CheckHost(scheme, host string, port int) (ok bool, reason string) {
	name, err := NormalizeHost(host)
	if err != nil {
		return false, err.Error()
	}
	hostOK, schemeOK := false, false
	for i := range p.rules {
		r := &p.rules[i]
		if !r.matches(name) {
			continue
		}
		hostOK = true
		if r.scheme != "" && r.scheme != scheme {
			continue
		}
		schemeOK = true
		if slices.Contains(r.ports, port) {
			return true, "allowed by rule " + r.String()
		}
	}
	switch {
	case !hostOK:
		return false, "host " + name + " is not granted"
	case !schemeOK:
		return false, "scheme " + scheme + " is not granted for " + name
	}
	return false, fmt.Sprintf("port %d is not granted for %s over %s", port, name, scheme)
}

// requestPath returns the path rules' paths are matched on: escaped (a
// request's path as sent, without its query) with each segment
// percent-decoded. It refuses a path whose shape a server could read
// otherwise: an encoded slash or a backslash (raw or encoded), a "." or
// ".." segment in any encoding or followed by ";parameters" (which servlet
// containers strip), any other ';', an empty segment, a percent sign left
// after decoding (double encoding), a '?' or '#' after decoding, invalid
// UTF-8 after decoding (overlong forms of '.' and '/'), a control
// character, a segment of only dots and spaces (which Windows reads as
// '.' or '..'), or a character that Unicode compatibility mapping (NFKC)
// turns into one of those or into such a segment.
func requestPath(escaped string) (string, error) {
	hides := func(what string) (string, error) {
		return "", errorf("path %q hides its shape: %s", escaped, what)
	}
	if !strings.HasPrefix(escaped, "/") {
		return "", errorf("path %q is not an absolute path", escaped)
	}
	segs := strings.Split(escaped[1:], "/")
	var b strings.Builder
	for i, seg := range segs {
		if seg == "" && i < len(segs)-1 {
			return hides("an empty segment")
		}
		dec, err := url.PathUnescape(seg)
		if err != nil {
			return hides("a bad percent-encoding")
		}
		switch {
		case strings.Contains(dec, "/"):
			return hides("an encoded slash")
		case strings.Contains(dec, "\\"):
			return hides("a backslash")
		case strings.ContainsAny(dec, "?#"):
			return hides("an encoded '?' or '#' (a server that decodes the path before passing it on cuts it there)")
		case strings.Contains(dec, "%"):
			return hides("a percent sign left after decoding (double encoding)")
		case !utf8.ValidString(dec):
			return hides("invalid UTF-8 after decoding")
		case strings.ContainsFunc(dec, func(c rune) bool { return c < ' ' || c == 0x7f }):
			return hides("a control character")
		}
		base, _, _ := strings.Cut(dec, ";")
		if base == "." || base == ".." {
			return hides("a '.' or '..' segment")
		}
		if base != "" && strings.Trim(base, ". ") == "" {
			// Windows drops a name's trailing dots and spaces: IIS and
			// servers on Windows may read ".. " or "..." as "..".
			return hides("a segment of only dots and spaces, which a server on Windows may read as '.' or '..'")
		}
		// A server that applies Unicode compatibility mapping (NFKC) reads
		// '／' as '/', '．．' and '‥' as '..'.
		if mapped := norm.NFKC.String(dec); mapped != dec {
			base, _, _ := strings.Cut(mapped, ";")
			if strings.ContainsAny(mapped, "/\\;%?#") || strings.Trim(base, ". ") == "" {
				return hides("a character that Unicode compatibility mapping turns into '/', '\\', '.', ';', '%', '?' or '#'")
			}
		}
		if strings.Contains(dec, ";") {
			return hides("a ';' (path parameters, which servers strip or cut the path at)")
		}
		b.WriteByte('/')
		b.WriteString(dec)
	}
	return b.String(), nil
}

// matchesPath reports whether one of the rule's paths matches clean: an
// exact path, a prefix ending in "*", or a suffix starting with "*".
func (r *rule) matchesPath(clean string) bool {
	for _, p := range r.paths {
		switch {
		case strings.HasPrefix(p, "*"):
			if strings.HasSuffix(clean, p[1:]) {
				return true
			}
		case strings.HasSuffix(p, "*"):
			if strings.HasPrefix(clean, p[:len(p)-1]) {
				return true
			}
		case clean == p:
			return true
		}
	}
	return false
}

func (r *rule) matches(name string) bool {
	if r.wildcard {
		return strings.HasSuffix(name, "."+r.host)
	}
	return name == r.host
}

func (r *rule) String() string {
	h := r.host
	if r.wildcard {
		h = "*." + h
	}
	if r.scheme != "" {
		h = r.scheme + "://" + h
	}
	ports := make([]string, len(r.ports))
	for i, p := range r.ports {
		ports[i] = strconv.Itoa(p)
	}
	s := h + " " + strings.Join(r.methods, ",") + " :" + strings.Join(ports, ",")
	if r.paths != nil {
		s += " " + strings.Join(r.paths, ",")
	}
	return s
}

// NormalizeHost returns the canonical form of a host name: lower case, the
// trailing dot stripped, U-labels converted to A-labels. It refuses IP
// literals in every spelling (dotted, decimal, hex, octal, short forms,
// IPv6 in brackets or not), empty names, names with a port or characters
// no DNS name has.
func NormalizeHost(host string) (string, error) {
	name, err := netname.Normalize(host)
	if err != nil {
		return "", policyError(err.Error())
	}
	return name, nil
}

type policyError string

func (e policyError) Error() string { return string(e) }

func errorf(format string, args ...any) error {
	return policyError(fmt.Sprintf(format, args...))
}
