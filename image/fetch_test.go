package image

import (
	"net/netip"
	"testing"
)

// TestAddrClass: every spelling of an internal address a dial may reach is
// judged by what it reaches, by the egress gateway's rule.
func TestAddrClass(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1": "loopback address", "127.9.9.9": "loopback address", "::1": "loopback address",
		"::ffff:127.0.0.1": "loopback address",
		"169.254.169.254":  "metadata service address", "::ffff:169.254.169.254": "metadata service address",
		"168.63.129.16": "metadata service address", "fd00:ec2::254": "metadata service address",
		"fe80::1": "link-local address", "fe80::1%lo": "link-local address", "169.254.1.1": "link-local address",
		"10.1.2.3": "private address", "172.16.0.1": "private address", "192.168.1.1": "private address",
		"100.100.100.200": "metadata service address", "100.64.0.1": "CGNAT address",
		"fd00::1": "unique-local address", "fec0::1": "site-local address",
		"0.0.0.0": "this-network address", "0.1.2.3": "this-network address", "::": "unspecified address",
		"224.0.0.1": "multicast address", "ff02::1": "multicast address", "255.255.255.255": "reserved address",
		// IPv6 forms that carry an internal IPv4 address inside.
		"64:ff9b::7f00:1": "NAT64 address", "2002:a9fe:a9fe::1": "6to4 address", "2001::1": "Teredo address",
		"::a9fe:a9fe": "IPv4-compatible IPv6 address",
		"8.8.8.8":     "", "2606:4700::1": "",
	} {
		if got := addrClass(netip.MustParseAddr(addr)); got != want {
			t.Errorf("%s: %q, want %q", addr, got, want)
		}
	}
}
