package egress

import (
	"context"
	"errors"
	"net/netip"
	"reflect"
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
		ok, reason := p.Check(c.method, "https", c.host, c.port, "/")
		if ok != c.ok || !strings.Contains(reason, c.reason) {
			t.Errorf("Check(%s %s:%d) = %v %q; want %v (%q)", c.method, c.host, c.port, ok, reason, c.ok, c.reason)
		}
	}
	if ok, _ := p.CheckHost("https", "api.example", 8443); !ok {
		t.Error("CheckHost(api.example:8443) refused")
	}
	if ok, _ := p.CheckHost("https", "api.example", 22); ok {
		t.Error("CheckHost(api.example:22) allowed")
	}
}

// TestPolicySchemeAndPaths: a rule's scheme picks its default port and
// limits the scheme; its paths limit the requests it allows (exact,
// prefix, suffix), matched on the decoded path without the query; a path
// that hides its shape is refused by a rule with paths and allowed by one
// without.
func TestPolicySchemeAndPaths(t *testing.T) {
	p, err := NewPolicy([]airlock.NetRule{
		{Host: "git.example", Methods: []string{"GET"}, Paths: []string{"*/info/refs"}},
		{Host: "git.example", Methods: []string{"POST"}, Paths: []string{"*/git-upload-pack"}},
		{Host: "docs.example", Scheme: "https", Paths: []string{"/org/repo/*", "/"}},
		{Host: "plain.example", Scheme: "http"},
		{Host: "open.example"},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		method, scheme, host string
		port                 int
		path                 string
		ok                   bool
		reason               string
	}{
		{"GET", "https", "git.example", 443, "/org/repo.git/info/refs", true, ""},
		{"GET", "http", "git.example", 80, "/org/repo.git/info/refs", true, ""},
		{"POST", "https", "git.example", 443, "/org/repo.git/git-upload-pack", true, ""},
		{"POST", "https", "git.example", 443, "/org/repo.git/git-receive-pack", false, "path /org/repo.git/git-receive-pack is not granted"},
		{"GET", "https", "git.example", 443, "/org/repo.git/git-upload-pack", false, "not granted"},
		{"PUT", "https", "git.example", 443, "/org/repo.git/info/refs", false, "method PUT"},
		{"GET", "https", "git.example", 443, "/org/r%65po.git/info/refs", true, ""},
		{"GET", "https", "git.example", 443, "/info/refs", true, ""},
		{"GET", "https", "git.example", 443, "/org/info/refs/x", false, "not granted"},
		{"GET", "https", "git.example", 443, "/x/..%2Finfo/refs", false, "encoded slash"},
		{"GET", "https", "git.example", 443, "/x/%2e%2E/info/refs", false, "'..' segment"},
		{"GET", "https", "git.example", 443, "/x/./info/refs", false, "'..' segment"},
		{"GET", "https", "git.example", 443, "/x/..;a=b/info/refs", false, "'..' segment"},
		{"GET", "https", "git.example", 443, "/x//info/refs", false, "empty segment"},
		{"POST", "https", "git.example", 443, "/x;/git-upload-pack", false, "';'"},
		{"POST", "https", "git.example", 443, "/x%3b/git-upload-pack", false, "';'"},
		{"GET", "https", "git.example", 443, "/x/a%5cb/info/refs", false, "backslash"},
		{"GET", "https", "git.example", 443, "/x/%252e/info/refs", false, "double encoding"},
		{"GET", "https", "git.example", 443, "/x/%c0%ae/info/refs", false, "UTF-8"},
		{"GET", "https", "git.example", 443, "/x/%00/info/refs", false, "control"},
		{"GET", "https", "git.example", 443, "/x/%zz/info/refs", false, "percent-encoding"},
		{"GET", "https", "git.example", 443, "*", false, "not an absolute path"},
		{"GET", "https", "docs.example", 443, "/org/repo/a/b", true, ""},
		{"GET", "https", "docs.example", 443, "/org/repo/", true, ""},
		{"GET", "https", "docs.example", 443, "/", true, ""},
		{"GET", "https", "docs.example", 443, "/org/repo", false, "not granted"},
		{"GET", "https", "docs.example", 443, "/org/repo/%EF%BC%8E%EF%BC%8E/secret", false, "compatibility"}, // fullwidth ．．
		{"GET", "https", "docs.example", 443, "/org/repo/%E2%80%A5/secret", false, "compatibility"},          // ‥ two dot leader
		{"GET", "https", "docs.example", 443, "/org/repo/a%EF%BC%8F..%EF%BC%8Fb", false, "compatibility"},    // fullwidth ／
		{"GET", "https", "docs.example", 443, "/org/repo/a%EF%BC%BCb", false, "compatibility"},               // fullwidth ＼
		{"GET", "https", "docs.example", 443, "/org/repo/B%C3%BCcher%E2%80%A6", true, ""},                    // ü and … stay
		{"GET", "https", "docs.example", 443, "/org/repo/%EF%BD%81", true, ""},                               // fullwidth ａ
		{"GET", "https", "docs.example", 443, "/org/repo/..%20/secret", false, "dots and spaces"},            // Windows drops trailing dots and spaces
		{"GET", "https", "docs.example", 443, "/org/repo/.../secret", false, "dots and spaces"},
		{"GET", "https", "docs.example", 443, "/org/repo/.%20./secret", false, "dots and spaces"},
		{"GET", "https", "docs.example", 443, "/org/repo/v1.2./x", true, ""},
		{"GET", "https", "docs.example", 443, "/org/repository", false, "not granted"},
		{"GET", "http", "docs.example", 80, "/org/repo/a", false, "scheme http"},
		{"GET", "https", "docs.example", 80, "/org/repo/a", false, "port 80"},
		{"GET", "http", "plain.example", 80, "/", true, ""},
		{"GET", "http", "plain.example", 443, "/", false, "port 443"},
		{"GET", "https", "plain.example", 443, "/", false, "scheme https"},
		{"GET", "https", "open.example", 443, "/x/../y", true, ""},
		{"GET", "http", "open.example", 80, "//a%2fb", true, ""},
	} {
		ok, reason := p.Check(c.method, c.scheme, c.host, c.port, c.path)
		if ok != c.ok || !strings.Contains(reason, c.reason) {
			t.Errorf("Check(%s %s://%s:%d%s) = %v %q; want %v (%q)", c.method, c.scheme, c.host, c.port, c.path, ok, reason, c.ok, c.reason)
		}
	}
	for _, c := range []struct {
		scheme, host string
		port         int
		ok           bool
	}{
		{"https", "git.example", 443, true}, // its rules have paths: checked per request
		{"https", "docs.example", 443, true},
		{"https", "plain.example", 443, false},
		{"https", "plain.example", 80, false},
		{"https", "open.example", 443, true},
		{"https", "docs.example", 8443, false},
	} {
		if ok, reason := p.CheckHost(c.scheme, c.host, c.port); ok != c.ok {
			t.Errorf("CheckHost(%s %s:%d) = %v %q, want %v", c.scheme, c.host, c.port, ok, reason, c.ok)
		}
	}
}

// TestParseRulesSchemeAndPaths: the policy file's YAML and JSON forms
// carry a rule's scheme and paths.
func TestParseRulesSchemeAndPaths(t *testing.T) {
	want := []airlock.NetRule{{Host: "git.example", Methods: []string{"GET"}, Scheme: "https", Paths: []string{"*/info/refs"}}}
	for _, in := range []string{
		"- host: git.example\n  methods: [GET]\n  scheme: https\n  paths: [\"*/info/refs\"]\n",
		`[{"host":"git.example","methods":["GET"],"scheme":"https","paths":["*/info/refs"]}]`,
	} {
		got, err := ParseRules([]byte(in))
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("ParseRules(%q) = %+v, %v", in, got, err)
		}
	}
}

func TestPolicyRefusesBadRules(t *testing.T) {
	for _, r := range []airlock.NetRule{
		{Host: "127.0.0.1"}, {Host: "0x7f000001"}, {Host: "[::1]"}, {Host: "*."},
		{Host: "https://example.com"}, {Host: "example.com:443"}, {Host: "ex ample.com"},
		{Host: "example.com", Methods: []string{"GE T"}}, {Host: "example.com", Ports: []int{0}},
		{Host: "*.com"},
		{Host: "example.com", Scheme: "ftp"}, {Host: "example.com", Scheme: "HTTPS"},
		{Host: "example.com", Paths: []string{"info/refs"}}, {Host: "example.com", Paths: []string{"/a/../b"}},
		{Host: "example.com", Paths: []string{"/a%2fb"}}, {Host: "example.com", Paths: []string{"/a//b"}},
		{Host: "example.com", Paths: []string{"*"}}, {Host: "example.com", Paths: []string{"/a*b"}},
	} {
		_, err := NewPolicy([]airlock.NetRule{r})
		var inv *airlock.InvalidJob
		if !errors.As(err, &inv) || inv.Field != "grants.net" {
			t.Errorf("NewPolicy(%+v) = %v, want *airlock.InvalidJob{grants.net}", r, err)
		}
		// The job's own validation refuses it too, before any tier is
		// chosen: explain and run must not disagree about it.
		job := airlock.Job{Kind: airlock.KindCommand, Argv: []string{"true"}, Grants: airlock.Grants{Net: []airlock.NetRule{r}}}
		if err := job.Validate(); !errors.As(err, &inv) || inv.Field != "grants.net" {
			t.Errorf("Job.Validate with %+v = %v, want *airlock.InvalidJob{grants.net}", r, err)
		}
	}
	for _, r := range []airlock.NetRule{
		{Host: "example.com"}, {Host: "*.example.com", Methods: []string{"GET", "PROPFIND", AnyMethod}},
		{Host: "Bücher.example.", Scheme: "https", Ports: []int{8443}, Paths: []string{"/a/*"}},
	} {
		job := airlock.Job{Kind: airlock.KindCommand, Argv: []string{"true"}, Grants: airlock.Grants{Net: []airlock.NetRule{r}}}
		_, perr := NewPolicy([]airlock.NetRule{r})
		if err := job.Validate(); err != nil || perr != nil {
			t.Errorf("%+v: Job.Validate = %v, NewPolicy = %v; want both to accept it", r, err, perr)
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
		"100.100.100.200", "168.63.129.16", "::", "::1", "::ffff:127.0.0.1", "::ffff:10.0.0.1", "::127.0.0.1",
		"64:ff9b::7f00:1", "64:ff9b::808:808", "64:ff9b:1::1", "fd00:ec2::254", "fc00::1",
		"fe80::1", "ff02::1", "2002:7f00:1::1", "2001:0:4136:e378::1", "fec0::1", "2001:db8::1",
		"::ffff:0:7f00:1", "::ffff:0:a9fe:a9fe", // IPv4-translated (SIIT)
		"2001:2::1", "2001:10::1", "2001:20::1", // benchmarking, ORCHID: IETF protocol assignments
		"3fff::1", "5f00::1", // documentation (RFC 9637), SRv6 SIDs (RFC 9602)
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
	for _, bad := range []string{"127.0.0.1\n", "localhost 127.0.0.1\n", "169.254.169.254 meta.test\n", "0.0.0.0 x.test\n", "127.0.0.1 0x7f000001\n", "fd00:ec2::254 m.test\n",
		// The metadata address in the IPv6 forms that carry an IPv4
		// address: mapped, translated, compatible, NAT64 (both prefixes),
		// 6to4; and the unspecified and multicast ones so.
		"::ffff:169.254.169.254 m.test\n", "::ffff:0:169.254.169.254 m.test\n", "::169.254.169.254 m.test\n",
		"64:ff9b::169.254.169.254 m.test\n", "64:ff9b:1::a9fe:a9fe m.test\n", "2002:a9fe:a9fe::1 m.test\n",
		"64:ff9b::100.100.100.200 m.test\n", "64:ff9b:: m.test\n", "64:ff9b::224.0.0.1 m.test\n"} {
		if _, err := ParseHosts(strings.NewReader(bad)); err == nil {
			t.Errorf("ParseHosts(%q) succeeded", bad)
		}
	}
}

// The hosts file still answers SystemLookup (it holds names unrooted):
// localhost resolves to a loopback address.
func TestSystemLookupReadsTheHostsFile(t *testing.T) {
	addrs, err := SystemLookup(context.Background(), "ip", "localhost")
	if err != nil || len(addrs) == 0 || !addrs[0].Unmap().IsLoopback() {
		t.Fatalf("localhost: %v %v", addrs, err)
	}
}
