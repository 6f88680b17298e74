package image

import (
	"net/netip"
	"testing"
)

// TestKindOf: every spelling of an internal address a dial may reach is
// judged by what it reaches.
func TestKindOf(t *testing.T) {
	for addr, want := range map[string]addrKind{
		"127.0.0.1": kindLoopback, "127.9.9.9": kindLoopback, "::1": kindLoopback,
		"::ffff:127.0.0.1": kindLoopback, "64:ff9b::7f00:1": kindLoopback,
		"169.254.169.254": kindLinkLocal, "fe80::1": kindLinkLocal, "fe80::1%lo": kindLinkLocal,
		"64:ff9b::a9fe:a9fe": kindLinkLocal,
		"10.1.2.3":           kindPrivate, "172.16.0.1": kindPrivate, "192.168.1.1": kindPrivate,
		"100.100.100.200": kindPrivate, "fd00:ec2::254": kindPrivate, "fec0::1": kindPrivate,
		"0.0.0.0": kindUnspecified, "0.1.2.3": kindUnspecified, "::": kindUnspecified,
		"224.0.0.1": kindMulticast, "ff02::1": kindMulticast, "255.255.255.255": kindMulticast,
		"8.8.8.8": kindPublic, "198.51.100.7": kindPublic, "2606:4700::1": kindPublic,
	} {
		if got := kindOf(netip.MustParseAddr(addr)); got != want {
			t.Errorf("%s: %v, want %v", addr, got, want)
		}
	}
}
