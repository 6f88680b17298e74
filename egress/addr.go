package egress

import (
	"net/netip"
)

// Metadata addresses of cloud instance-metadata services.
var metadataAddrs = []netip.Addr{
	netip.MustParseAddr("169.254.169.254"), // AWS, GCP, Azure, OpenStack, ...
	netip.MustParseAddr("fd00:ec2::254"),   // AWS over IPv6
	netip.MustParseAddr("100.100.100.200"), // Alibaba Cloud
	netip.MustParseAddr("168.63.129.16"),   // Azure's WireServer (platform agent, DNS)
}

type prefixClass struct {
	p      netip.Prefix
	reason string
}

// blocked lists the special-purpose ranges no resolved address may fall in
// (IANA special-purpose registries). Go's netip classifies loopback,
// private, link-local and multicast, but not CGNAT, NAT64, IPv4-compatible
// or IPv4-translated IPv6 or 6to4, which would reach the same hosts by
// another spelling.
var blocked = func() []prefixClass {
	list := []struct{ p, reason string }{
		{"0.0.0.0/8", "this-network address"},
		{"10.0.0.0/8", "private address"},
		{"100.64.0.0/10", "CGNAT address"},
		{"127.0.0.0/8", "loopback address"},
		{"169.254.0.0/16", "link-local address"},
		{"172.16.0.0/12", "private address"},
		{"192.0.0.0/24", "IETF protocol assignment"},
		{"192.0.2.0/24", "documentation address"},
		{"192.88.99.0/24", "6to4 relay anycast"},
		{"192.168.0.0/16", "private address"},
		{"198.18.0.0/15", "benchmarking address"},
		{"198.51.100.0/24", "documentation address"},
		{"203.0.113.0/24", "documentation address"},
		{"224.0.0.0/4", "multicast address"},
		{"240.0.0.0/4", "reserved address"},
		{"::/128", "unspecified address"},
		{"::1/128", "loopback address"},
		{"::/96", "IPv4-compatible IPv6 address"},
		{"::ffff:0:0:0/96", "IPv4-translated IPv6 address"},
		{"64:ff9b::/96", "NAT64 address"},
		{"64:ff9b:1::/48", "local-use NAT64 address"},
		{"100::/64", "discard-only address"},
		{"2001::/32", "Teredo address"},
		{"2001::/23", "IETF protocol assignment"},
		{"2001:db8::/32", "documentation address"},
		{"2002::/16", "6to4 address"},
		{"3fff::/20", "documentation address"},
		{"5f00::/16", "SRv6 SID"},
		{"fc00::/7", "unique-local address"},
		{"fe80::/10", "link-local address"},
		{"fec0::/10", "site-local address"},
		{"ff00::/8", "multicast address"},
	}
	out := make([]prefixClass, len(list))
	for i, l := range list {
		out[i] = prefixClass{netip.MustParsePrefix(l.p), l.reason}
	}
	return out
}()

// Forbidden reports whether a resolved address must never be dialled, and
// why: loopback, private, link-local, CGNAT, unique-local, unspecified,
// multicast, metadata and the IPv6 forms that embed an IPv4 address
// (IPv4-mapped ::ffff:a.b.c.d, IPv4-compatible ::a.b.c.d, IPv4-translated
// ::ffff:0:a.b.c.d, NAT64, 6to4, Teredo). Only global unicast addresses
// pass.
func Forbidden(a netip.Addr) (reason string, bad bool) {
	if !a.IsValid() {
		return "invalid address", true
	}
	a = a.WithZone("")
	if a.Is4In6() {
		if r, bad := Forbidden(a.Unmap()); bad {
			return r + " (IPv4-mapped)", true
		}
		return "IPv4-mapped IPv6 address", true
	}
	for _, m := range metadataAddrs {
		if a == m {
			return "metadata service address", true
		}
	}
	for _, c := range blocked {
		if c.p.Contains(a) {
			return c.reason, true
		}
	}
	if !a.IsGlobalUnicast() {
		return "not a global unicast address", true
	}
	return "", false
}

// isMetadata reports whether a is a cloud metadata address; these are
// refused even when an operator pins a name to them.
func isMetadata(a netip.Addr) bool {
	a = a.Unmap().WithZone("")
	for _, m := range metadataAddrs {
		if a == m {
			return true
		}
	}
	return false
}
