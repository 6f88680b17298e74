// Package netname checks the host names and methods of network grants. The
// job's validation and the egress policy both use it, so a rule a job
// carries is refused before any tier is chosen exactly when the egress
// gateway would refuse it.
package netname

import (
	"fmt"
	"net/netip"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/idna"
)

// Rule checks a grant's host, "name" or "*.name": it returns the
// normalised name and whether it is a wildcard, which must leave at least
// two labels (so "*.com" is refused).
func Rule(host string) (name string, wildcard bool, err error) {
	host = strings.TrimSpace(host)
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		host, wildcard = rest, true
	}
	if name, err = Normalize(host); err != nil {
		return "", false, err
	}
	if wildcard && !strings.Contains(name, ".") {
		return "", false, fmt.Errorf("a wildcard needs at least two labels after \"*.\"")
	}
	return name, wildcard, nil
}

// idnaProfile maps and validates host names the way a browser's URL parser
// does (UTS #46, transitional off), producing A-labels.
var idnaProfile = idna.New(
	idna.MapForLookup(),
	idna.Transitional(false),
	idna.BidiRule(),
	idna.StrictDomainName(false), // allow '_' as seen in real service names
	idna.VerifyDNSLength(true),
)

// NormalizeHost returns the canonical form of a host name: lower case, the
// trailing dot stripped, U-labels converted to A-labels. It refuses IP
// literals in every spelling (dotted, decimal, hex, octal, short forms,
// IPv6 in brackets or not), empty names, names with a port or characters
// no DNS name has.
func Normalize(host string) (string, error) {
	h := strings.TrimSpace(host)
	if h == "" {
		return "", fmt.Errorf("empty host")
	}
	if strings.HasPrefix(h, "[") || strings.Contains(h, ":") {
		if strings.Contains(h, "://") {
			return "", fmt.Errorf("%q is a URL, not a host name", host)
		}
		if _, err := netip.ParseAddr(strings.Trim(h, "[]")); err == nil || strings.HasPrefix(h, "[") {
			return "", fmt.Errorf("IP literal %q is never allowed", host)
		}
		return "", fmt.Errorf("%q is not a host name (a port is not part of it)", host)
	}
	if !utf8.ValidString(h) || strings.ContainsAny(h, "/@?#%\\ \t") {
		return "", fmt.Errorf("%q is not a host name", host)
	}
	h = strings.TrimSuffix(h, ".")
	if _, err := netip.ParseAddr(h); err == nil {
		return "", fmt.Errorf("IP literal %q is never allowed", host)
	}
	a, err := idnaProfile.ToASCII(h)
	if err != nil {
		return "", fmt.Errorf("host %q is not a valid name: %v", host, err)
	}
	a = strings.TrimSuffix(strings.ToLower(a), ".")
	if a == "" || strings.Contains(a, "..") || strings.HasPrefix(a, ".") || strings.HasSuffix(a, ".") {
		return "", fmt.Errorf("host %q is not a valid name", host)
	}
	if strings.Contains(a, "xn--") {
		// An A-label must decode to a valid U-label (punycode for
		// U+FFFD, say, does not).
		if again, err := idnaProfile.ToASCII(a); err != nil || again != a {
			return "", fmt.Errorf("host %q is not a valid name", host)
		}
	}
	if looksNumeric(a) {
		return "", fmt.Errorf("IP literal %q is never allowed", host)
	}
	for _, c := range a {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_') {
			return "", fmt.Errorf("host %q is not a valid name", host)
		}
	}
	return a, nil
}

// looksNumeric reports whether a name would be read as an IPv4 address by
// some parser: its last label is a number (decimal, octal or 0x-hex), as
// in the WHATWG URL standard's "ends in a number" rule, which covers
// 2130706433, 0x7f000001, 0177.0.0.1 and 127.1.
func looksNumeric(name string) bool {
	labels := strings.Split(name, ".")
	last := labels[len(labels)-1]
	if last == "" {
		return false
	}
	if rest, ok := strings.CutPrefix(last, "0x"); ok {
		for _, c := range rest {
			if !strings.ContainsRune("0123456789abcdef", c) {
				return false
			}
		}
		return true
	}
	for _, c := range last {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// IsToken reports whether s is an RFC 9110 token (a valid method name).
func IsToken(s string) bool {
	for _, c := range s {
		if c <= ' ' || c >= 0x7f || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, c) {
			return false
		}
	}
	return s != ""
}
