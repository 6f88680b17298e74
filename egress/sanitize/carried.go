package sanitize

import (
	"net/netip"
	"strings"

	"golang.org/x/net/publicsuffix"

	"github.com/airlock-sandbox/airlock/egress"
)

// A URL on an allowed host can still lead elsewhere: an open redirect
// (/r?to=https://evil.example/?DATA), an image proxy or resizer
// (?url=evil.example/p.png), an archive (/save/https://evil.example/),
// a client-side router (#/login?next=//evil.example). The sanitiser
// cannot know which of an allowed host's endpoints do that, so a URL is
// offending when its query, fragment or path carries a URL or host name
// that is not allowed, unless the operator relaxed the host (Relaxed).
//
// What counts as carried, after percent-decoding repeatedly (double
// encoding) and reading "\" as "/":
//
//   - anywhere in the query, fragment or path: a URL with an authority,
//     "scheme://host" (any scheme) or "//host" (protocol-relative, when
//     host looks like a host name, see looksLikeHost);
//   - a parameter value that starts with http:, https:, javascript:,
//     vbscript: or mailto: (a redirect target; "https:evil.example"
//     without slashes reaches evil.example from a page of another scheme);
//   - a parameter value without a scheme that is a host name followed by
//     a path or port ("evil.example/log", "evil.example:8443") or starting
//     with "www.", or that is a bare host name or IP address in a
//     parameter whose name says it holds one (host=, url=, redirect=, ...).
//
// A bare dotted value anywhere else is data, not a host: q=hello.world,
// v=1.2.3, file=report.pdf, name=README.md. Deciding by the name's TLD
// alone would not do: .world, .md, .py, .zip and .sh are all real TLDs,
// and file names are everywhere in a code sandbox's output. A bare name
// is only dangerous when the endpoint builds a URL from it, and such
// endpoints name their parameter for what it holds.
//
// Paths are checked for embedded URLs with an authority only, on every
// host rather than a list of known redirectors (a list goes stale, and
// the model picks the redirector); a bare name in a path
// (/pkg/golang.org/x/net) is a path.
//
// A carried URL is judged by its scheme and host only. Whatever it
// carries in turn is part of the outer string, which is scanned whole, so
// a relaxed host inside a strict host's query gets no relaxation.

// maxDecode bounds the rounds of percent-decoding; a value still encoded
// after that many is refused rather than left unread.
const maxDecode = 4

// carriedBy reports whether the cleaned URL u (absolute or relative)
// carries, in its path, query or fragment, a URL or host name that is not
// allowed.
func (s *Sanitizer) carriedBy(u string) (reason string, bad bool) {
	path, query, frag := splitRef(u)
	for _, p := range []struct {
		where, s string
		params   bool
	}{{"the query", query, true}, {"the fragment", frag, true}, {"the path", path, false}} {
		if p.s == "" {
			continue
		}
		if r, bad := s.carriedIn(p.s, p.params); bad {
			return p.where + " " + r, true
		}
	}
	return "", false
}

// splitRef splits a URL into its path, query and fragment, as a browser
// does: the fragment after the first "#", the query after the first "?"
// before it, the authority ending at the first "/".
func splitRef(u string) (path, query, frag string) {
	if i := strings.IndexByte(u, '#'); i >= 0 {
		u, frag = u[:i], u[i+1:]
	}
	if i := strings.IndexByte(u, '?'); i >= 0 {
		u, query = u[:i], u[i+1:]
	}
	if i := strings.IndexByte(u, ':'); i > 0 && isScheme(u[:i]) {
		u = u[i+1:]
	}
	if rest, ok := strings.CutPrefix(u, "//"); ok {
		u = ""
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			u = rest[i:]
		}
	}
	return u, query, frag
}

// carriedIn checks one part of a URL in each of its decodings.
func (s *Sanitizer) carriedIn(part string, params bool) (reason string, bad bool) {
	cur := part
	for round := 0; ; round++ {
		if r, bad := s.embedded(cur); bad {
			return r, true
		}
		if params {
			if r, bad := s.params(cur); bad {
				return r, true
			}
		}
		next := normalize(unescape(cur))
		if next == cur {
			return "", false
		}
		if round == maxDecode {
			return "is percent-encoded too many times to be read", true
		}
		cur = next
	}
}

// embedded checks every URL with an authority inside str: each run of
// two or more slashes, with the scheme before it if there is one.
func (s *Sanitizer) embedded(str string) (reason string, bad bool) {
	for i := 0; ; {
		j := strings.Index(str[i:], "//")
		if j < 0 {
			return "", false
		}
		start := i + j
		end := start
		for end < len(str) && str[end] == '/' {
			end++
		}
		i = end
		auth := str[end:]
		if k := strings.IndexAny(auth, "/?#&,;=\"'<>`{}|^() \t\r\n\f\v"); k >= 0 {
			auth = auth[:k]
		}
		scheme := schemeBefore(str[:start])
		if r, bad := s.carriedHost(auth, scheme != ""); bad {
			return r, true
		}
		if scheme == "javascript" || scheme == "vbscript" {
			return "carries a script URL", true
		}
	}
}

// schemeBefore returns the scheme that ends, with its colon, at the end
// of s ("" if none).
func schemeBefore(s string) string {
	if !strings.HasSuffix(s, ":") {
		return ""
	}
	s = s[:len(s)-1]
	k := len(s)
	for k > 0 && isSchemeByte(s[k-1]) {
		k--
	}
	for k < len(s) && !isLetter(s[k]) {
		k++
	}
	return strings.ToLower(s[k:])
}

// carriedHost judges the authority of a carried URL. With a scheme, any
// authority names a host; without one ("//x"), only one that looks like a
// host name does (a//b in a value is not a URL).
func (s *Sanitizer) carriedHost(auth string, scheme bool) (reason string, bad bool) {
	host := auth
	userinfo := false
	if i := strings.LastIndexByte(host, '@'); i >= 0 {
		host, userinfo = host[i+1:], true
	}
	if strings.HasPrefix(host, "[") {
		return "carries a URL to an IP literal", true
	}
	if i := strings.IndexByte(host, ':'); i >= 0 {
		host = host[:i]
	}
	if !scheme && !looksLikeHost(host) {
		return "", false
	}
	switch {
	case userinfo:
		return "carries a URL with userinfo (host confusion)", true
	case host == "" && !scheme:
		return "", false
	}
	if _, err := egress.NormalizeHost(host); err != nil {
		return "carries a URL whose host is refused: " + err.Error(), true
	}
	if !s.allow.AllowsName(host) {
		return "carries a URL whose host is not on the output allowlist", true
	}
	return "", false
}

// params checks each parameter of a query or fragment: key=value pairs
// separated by & or ; (and ? or #, so a route in a fragment and a query
// inside a value are split too). A value after the last "=" is checked
// as well, with the word before it as its key: state=host=evil.example.
func (s *Sanitizer) params(str string) (reason string, bad bool) {
	for _, piece := range strings.FieldsFunc(str, func(r rune) bool { return r == '&' || r == ';' || r == '?' || r == '#' }) {
		first, last := strings.IndexByte(piece, '='), strings.LastIndexByte(piece, '=')
		pairs := [][2]string{{"", piece}}
		if first >= 0 {
			pairs = [][2]string{{piece[:first], piece[first+1:]}, {piece[:last], piece[last+1:]}}
		}
		for _, kv := range pairs {
			if r, bad := s.param(lastWord(kv[0]), strings.TrimSpace(kv[1])); bad {
				return r, true
			}
		}
	}
	return "", false
}

func (s *Sanitizer) param(key, v string) (reason string, bad bool) {
	if i := strings.IndexByte(v, ':'); i > 0 {
		switch strings.ToLower(v[:i]) {
		case "http", "https", "javascript", "vbscript", "mailto":
			if r, bad := s.checkURL(v, false); bad {
				return "carries a URL: " + r, true
			}
			return "", false
		}
	}
	host, ok := bareHost(key, v)
	if !ok {
		return "", false
	}
	if _, err := egress.NormalizeHost(host); err != nil {
		return "names a host that is refused: " + err.Error(), true
	}
	if !s.allow.AllowsName(host) {
		return "names a host that is not on the output allowlist", true
	}
	return "", false
}

// bareHost returns the host a scheme-less parameter value names, if it
// names one (see the rule at the top of this file).
func bareHost(key, v string) (string, bool) {
	name, rest := v, ""
	if i := strings.IndexAny(v, "/:"); i >= 0 {
		name, rest = v[:i], v[i:]
	}
	shaped := len(name) > 4 && strings.EqualFold(name[:4], "www.") || strings.HasPrefix(rest, "/") || isPort(rest)
	if rest != "" && !shaped {
		return "", false
	}
	if !shaped && !hostKey(key) {
		return "", false
	}
	if _, err := netip.ParseAddr(name); err == nil {
		return name, hostKey(key) // v=1.2.3.4 is a version; host=1.2.3.4 is not
	}
	return name, looksLikeHost(name)
}

// isPort reports whether rest is ":digits", alone or before a path.
func isPort(rest string) bool {
	p, ok := strings.CutPrefix(rest, ":")
	if !ok {
		return false
	}
	if i := strings.IndexByte(p, '/'); i >= 0 {
		p = p[:i]
	}
	if p == "" {
		return false
	}
	for _, c := range []byte(p) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// looksLikeHost reports whether name is a DNS name of two or more labels
// whose top-level label is a real one (on the public suffix list, or a
// special-use name such as .example, .test, .internal), or an IPv4
// address.
func looksLikeHost(name string) bool {
	if a, err := netip.ParseAddr(name); err == nil {
		return a.Is4()
	}
	h, err := egress.NormalizeHost(name)
	if err != nil {
		return false
	}
	dot := strings.LastIndexByte(h, '.')
	if dot < 0 {
		return false
	}
	tld := h[dot+1:]
	if specialUse[tld] {
		return true
	}
	_, icann := publicsuffix.PublicSuffix(tld)
	return icann
}

// specialUse are reserved top-level names (RFC 2606, RFC 6761, ICANN's
// .internal) that the public suffix list does not hold but a renderer's
// network may resolve.
var specialUse = map[string]bool{"example": true, "test": true, "invalid": true, "localhost": true, "local": true, "internal": true}

// hostKey reports whether a parameter's name says it holds a host or URL.
func hostKey(key string) bool {
	k := strings.Map(func(r rune) rune {
		switch {
		case r >= 'A' && r <= 'Z':
			return r + 'a' - 'A'
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			return r
		}
		return -1
	}, key)
	switch k {
	case "to", "u", "r", "go", "out", "next", "dest":
		return true
	}
	for _, w := range []string{"url", "uri", "host", "domain", "redirect", "redir", "return", "callback", "forward", "goto", "target", "destination", "continue", "href", "link", "site", "server", "origin", "endpoint", "proxy"} {
		if strings.Contains(k, w) {
			return true
		}
	}
	return false
}

// lastWord returns the trailing run of letters, digits, "_", "-" and "."
// of a key ("/login?next" -> "next", "state=host" -> "host").
func lastWord(key string) string {
	i := len(key)
	for i > 0 {
		c := key[i-1]
		if !(isLetter(c) || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.' || c == '[' || c == ']') {
			break
		}
		i--
	}
	return key[i:]
}

// unescape decodes every valid %XX escape and leaves invalid ones as they
// are, as lenient servers do (a strict decoder would give up at the first
// stray "%" and read nothing after it).
func unescape(s string) string {
	if strings.IndexByte(s, '%') < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			b.WriteByte(unhex(s[i+1])<<4 | unhex(s[i+2]))
			i += 2
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// normalize reads a URL as a browser does inside it: tabs and newlines
// removed, backslashes read as slashes (cleanURL also trims its ends).
func normalize(s string) string {
	if !strings.ContainsAny(s, "\t\n\r\\") {
		return s
	}
	return strings.Map(func(r rune) rune {
		switch r {
		case '\t', '\n', '\r':
			return -1
		case '\\':
			return '/'
		}
		return r
	}, s)
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

func isSchemeByte(c byte) bool {
	return isLetter(c) || c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.'
}

// mailtoHeaders checks the recipients a mailto URL's headers add (to,
// cc, bcc; RFC 6068): each must be at an allowed mail domain.
func (s *Sanitizer) mailtoHeaders(query string) (reason string, bad bool) {
	for _, kv := range strings.Split(query, "&") {
		k, v, _ := strings.Cut(kv, "=")
		switch strings.ToLower(unescape(k)) {
		case "to", "cc", "bcc":
		default:
			continue
		}
		for _, addr := range strings.Split(unescape(v), ",") {
			addr = strings.TrimSpace(addr)
			if addr == "" {
				continue
			}
			at := strings.LastIndexByte(addr, '@')
			if at < 0 || !s.allow.AllowsName(addr[at+1:]) {
				return "mailto header adds a recipient whose mail domain is not allowed", true
			}
		}
	}
	return "", false
}
