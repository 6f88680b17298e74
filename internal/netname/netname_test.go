package netname

import (
	"net/netip"
	"testing"
)

// FuzzNormalize checks that an accepted name is canonical (normalising
// it again changes nothing) and is never something an address parser
// would take.
func FuzzNormalize(f *testing.F) {
	for _, s := range []string{"example.com", "127.0.0.1", "0x7f.1", "Bücher.example.", "[::1]", "１２７.0.0.1", "a.b.0x1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		n, err := Normalize(in)
		if err != nil {
			return
		}
		if again, err := Normalize(n); err != nil || again != n {
			t.Fatalf("%q -> %q -> %q, %v", in, n, again, err)
		}
		if _, err := netip.ParseAddr(n); err == nil || looksNumeric(n) {
			t.Fatalf("%q -> %q is an address", in, n)
		}
	})
}

func TestRule(t *testing.T) {
	for _, c := range []struct {
		in, name string
		wildcard bool
	}{
		{"Example.COM.", "example.com", false},
		{" *.example.com ", "example.com", true},
		{"*.bücher.example", "xn--bcher-kva.example", true},
	} {
		name, wildcard, err := Rule(c.in)
		if err != nil || name != c.name || wildcard != c.wildcard {
			t.Errorf("Rule(%q) = %q, %v, %v; want %q, %v", c.in, name, wildcard, err, c.name, c.wildcard)
		}
	}
	for _, in := range []string{"", "*.", "*.com", "*", "bad:host:x", "[::1]", "::1", "127.0.0.1", "2130706433", "0x7f.1", "a.b.0x1",
		"http://example.com", "example.com/path", "user@example.com", "exa mple.com", "example.com:443", "a..b", ".example.com", "*.*.example.com"} {
		if name, _, err := Rule(in); err == nil {
			t.Errorf("Rule(%q) = %q, want an error", in, name)
		}
	}
}

func TestIsToken(t *testing.T) {
	for _, m := range []string{"GET", "PROPFIND", "M-SEARCH", "*"} {
		if !IsToken(m) {
			t.Errorf("IsToken(%q) = false", m)
		}
	}
	for _, m := range []string{"", "GE T", "GET/1", "GE(T", "GET\n", "GÉT"} {
		if IsToken(m) {
			t.Errorf("IsToken(%q) = true", m)
		}
	}
}
