package egress

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock"
)

func TestNormalizeHostRefusesIPLiterals(t *testing.T) {
	for _, h := range []string{
		"127.0.0.1", "2130706433", "0x7f000001", "0X7F000001", "0177.0.0.1", "127.1", "127.0.1",
		"0x7f.1", "0", "017700000001", "::1", "[::1]", "::ffff:127.0.0.1", "[::ffff:7f00:1]",
		"64:ff9b::7f00:1", "::127.0.0.1", "fe80::1%eth0", "169.254.169.254", "fd00:ec2::254",
		"127.0.0.1.", "1.2.3.4.", "０x7f000001", "１２７.０.０.１", "example.com.127",
	} {
		if n, err := NormalizeHost(h); err == nil {
			t.Errorf("NormalizeHost(%q) = %q, want an error", h, n)
		}
	}
}

func TestNormalizeHostNames(t *testing.T) {
	for in, want := range map[string]string{
		"Example.COM":           "example.com",
		"example.com.":          "example.com",
		"bücher.example":        "xn--bcher-kva.example",
		"XN--BCHER-KVA.example": "xn--bcher-kva.example",
		"ｅｘａｍｐｌｅ.com":           "example.com", // full-width letters map to ASCII
		"a_b.example":           "a_b.example",
		"1password.com":         "1password.com",
		"0xcafe.example":        "0xcafe.example", // a hex-looking label that is not the last one
	} {
		got, err := NormalizeHost(in)
		if err != nil || got != want {
			t.Errorf("NormalizeHost(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", " ", "a..b", "a/b", "user@host", "host:80", "a b", "evil\\.com", "%65vil.com"} {
		if n, err := NormalizeHost(bad); err == nil {
			t.Errorf("NormalizeHost(%q) = %q, want an error", bad, n)
		}
	}
}

func TestPolicy(t *testing.T) {
	p, err := NewPolicy([]airlock.NetRule{
		{Host: "registry.example"},
		{Host: "api.example", Methods: []string{"GET", "POST"}, Ports: []int{8443}},
		{Host: "*.cdn.example"},
		{Host: "Bücher.example", Methods: []string{"*"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		method, host string
		port         int
		ok           bool
		reason       string
	}{
		{"GET", "registry.example", 443, true, ""},
		{"HEAD", "REGISTRY.example.", 80, true, ""},
		{"get", "registry.example", 80, true, ""},
		{"PUT", "registry.example", 443, false, "method PUT"},
		{"GET", "registry.example", 8080, false, "port 8080"},
		{"GET", "sub.registry.example", 443, false, "not granted"},
		{"POST", "api.example", 8443, true, ""},
		{"POST", "api.example", 443, false, "port 443"},
		{"GET", "a.cdn.example", 443, true, ""},
		{"GET", "a.b.cdn.example", 443, true, ""},
		{"GET", "cdn.example", 443, false, "not granted"},
		{"GET", "evilcdn.example", 443, false, "not granted"},
		{"DELETE", "xn--bcher-kva.example", 443, true, ""},
		{"GET", "2130706433", 80, false, "IP literal"},
	} {
		ok, reason := p.Check(c.method, c.host, c.port)
		if ok != c.ok || !strings.Contains(reason, c.reason) {
			t.Errorf("Check(%s %s:%d) = %v %q; want %v (%q)", c.method, c.host, c.port, ok, reason, c.ok, c.reason)
		}
	}
	if ok, _ := p.CheckHost("api.example", 8443); !ok {
		t.Error("CheckHost(api.example:8443) refused")
	}
	if ok, _ := p.CheckHost("api.example", 22); ok {
		t.Error("CheckHost(api.example:22) allowed")
	}
}

func TestPolicyRefusesBadRules(t *testing.T) {
	for _, r := range []airlock.NetRule{
		{Host: "127.0.0.1"}, {Host: "0x7f000001"}, {Host: "[::1]"}, {Host: "*."},
		{Host: "https://example.com"}, {Host: "example.com:443"}, {Host: "ex ample.com"},
		{Host: "example.com", Methods: []string{"GE T"}}, {Host: "example.com", Ports: []int{0}},
		{Host: "*.com"},
	} {
		_, err := NewPolicy([]airlock.NetRule{r})
		var inv *airlock.InvalidJob
		if !errors.As(err, &inv) || inv.Field != "grants.net" {
			t.Errorf("NewPolicy(%+v) = %v, want *airlock.InvalidJob{grants.net}", r, err)
		}
	}
	if p, err := NewPolicy(nil); err != nil || !p.Empty() {
		t.Errorf("NewPolicy(nil) = %v, %v", p, err)
	}
}

func TestForbidden(t *testing.T) {
	for _, a := range []string{
		"127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "169.254.1.1",
		"100.64.0.1", "100.127.255.254", "0.0.0.0", "255.255.255.255", "224.0.0.1", "198.18.0.1",
		"100.100.100.200", "::", "::1", "::ffff:127.0.0.1", "::ffff:10.0.0.1", "::127.0.0.1",
		"64:ff9b::7f00:1", "64:ff9b::808:808", "64:ff9b:1::1", "fd00:ec2::254", "fc00::1",
		"fe80::1", "ff02::1", "2002:7f00:1::1", "2001:0:4136:e378::1", "fec0::1", "2001:db8::1",
	} {
		if _, bad := Forbidden(netip.MustParseAddr(a)); !bad {
			t.Errorf("Forbidden(%s) = false", a)
		}
	}
	for _, a := range []string{"93.184.215.14", "8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "::ffff:8.8.8.8"} {
		r, bad := Forbidden(netip.MustParseAddr(a))
		if bad && a != "::ffff:8.8.8.8" {
			t.Errorf("Forbidden(%s) = %q", a, r)
		}
	}
}

func TestParseHosts(t *testing.T) {
	h, err := ParseHosts(strings.NewReader("# pins\n127.0.0.1 origin.test  Registry.Internal. # trailing\n\n::1 origin.test\n10.0.0.5 mirror.corp\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := h["origin.test"]; len(got) != 2 || got[0] != netip.MustParseAddr("127.0.0.1") {
		t.Errorf("origin.test pins = %v", got)
	}
	if got := h["registry.internal"]; len(got) != 1 {
		t.Errorf("registry.internal pins = %v", got)
	}
	for _, bad := range []string{"127.0.0.1\n", "localhost 127.0.0.1\n", "169.254.169.254 meta.test\n", "0.0.0.0 x.test\n", "127.0.0.1 0x7f000001\n", "fd00:ec2::254 m.test\n"} {
		if _, err := ParseHosts(strings.NewReader(bad)); err == nil {
			t.Errorf("ParseHosts(%q) succeeded", bad)
		}
	}
}

// FuzzNormalizeHost checks that an accepted name is canonical (normalising
// it again changes nothing) and is never something an address parser
// would take.
func FuzzNormalizeHost(f *testing.F) {
	for _, s := range []string{"example.com", "127.0.0.1", "0x7f.1", "Bücher.example.", "[::1]", "１２７.0.0.1", "a.b.0x1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		n, err := NormalizeHost(in)
		if err != nil {
			return
		}
		if again, err := NormalizeHost(n); err != nil || again != n {
			t.Fatalf("%q -> %q -> %q, %v", in, n, again, err)
		}
		if _, err := netip.ParseAddr(n); err == nil || looksNumeric(n) {
			t.Fatalf("%q -> %q is an address", in, n)
		}
	})
}
