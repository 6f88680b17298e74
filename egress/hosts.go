package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
)

// Hosts pins names to addresses, like an /etc/hosts for the proxy and the
// resolver. Keys are normalised host names (see [NormalizeHost]).
//
// A pin is the only way a name reaches a non-public address (a loopback
// test origin, an internal registry on a closed network): the operator
// names the address explicitly. A pin never grants a name — the rules
// still decide — and metadata, unspecified and multicast addresses stay
// refused even when pinned.
type Hosts map[string][]netip.Addr

// ParseHosts reads /etc/hosts-like lines: an address followed by one or
// more names; '#' starts a comment. Names are normalised; a line whose
// address is not an IP address, or whose name is not a host name, is an
// error naming the line.
func ParseHosts(r io.Reader) (Hosts, error) {
	h := Hosts{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) < 2 {
			return nil, fmt.Errorf("hosts line %d: want an address and at least one name", n)
		}
		a, err := netip.ParseAddr(f[0])
		if err != nil {
			return nil, fmt.Errorf("hosts line %d: %q is not an IP address", n, f[0])
		}
		for _, name := range f[1:] {
			if err := h.Add(name, a); err != nil {
				return nil, fmt.Errorf("hosts line %d: %w", n, err)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading hosts: %w", err)
	}
	return h, nil
}

// Add pins name to a (in addition to its earlier pins).
func (h Hosts) Add(name string, a netip.Addr) error {
	n, err := NormalizeHost(name)
	if err != nil {
		return err
	}
	if why, bad := pinRefused(a); bad {
		return fmt.Errorf("cannot pin %s to %s: %s", name, a, why)
	}
	a = a.Unmap().WithZone("")
	if !slices.Contains(h[n], a) {
		h[n] = append(h[n], a)
	}
	return nil
}

// clone returns a deep copy, so a Config's pins cannot change under a
// running gateway.
func (h Hosts) clone() Hosts {
	out := make(Hosts, len(h))
	for k, v := range h {
		out[k] = slices.Clone(v)
	}
	return out
}

func pinRefused(a netip.Addr) (string, bool) {
	u := a.Unmap()
	if !u.IsValid() {
		return "invalid address", true
	}
	for _, v := range append([]netip.Addr{u}, embeddedIPv4(u)...) {
		switch {
		case isMetadata(v):
			return "metadata service address", true
		case v.IsUnspecified():
			return "unspecified address", true
		case v.IsMulticast():
			return "multicast address", true
		}
	}
	return "", false
}

// embeddedIPv4 returns the IPv4 address an IPv6 address carries in a form
// that reaches it by translation or tunnelling: IPv4-translated
// (::ffff:0:a.b.c.d), IPv4-compatible (::a.b.c.d), NAT64 (64:ff9b::/96,
// and the local-use 64:ff9b:1::/48 in its /96 layout) and 6to4
// (2002:aabb:ccdd::/48).
func embeddedIPv4(a netip.Addr) []netip.Addr {
	if !a.Is6() {
		return nil
	}
	b := a.As16()
	last := netip.AddrFrom4([4]byte(b[12:16]))
	var out []netip.Addr
	for _, p := range []string{"::ffff:0:0:0/96", "::/96", "64:ff9b::/96", "64:ff9b:1::/48"} {
		if netip.MustParsePrefix(p).Contains(a) {
			out = append(out, last)
		}
	}
	if netip.MustParsePrefix("2002::/16").Contains(a) {
		out = append(out, netip.AddrFrom4([4]byte(b[2:6])))
	}
	return out
}

// LookupFunc resolves a host name to addresses of the given network
// ("ip", "ip4" or "ip6"), like net.Resolver.LookupNetIP: the upstream the
// proxy and resolver use for names that are granted but not pinned.
type LookupFunc func(ctx context.Context, network, host string) ([]netip.Addr, error)

// SystemLookup resolves through the host's resolver, the name as it is:
// first in the hosts file, then in DNS rooted, so that the resolver's
// search domains are not tried after it fails (NAME.corp.example is
// another host than the one granted, and asking for it carries the job's
// labels to the search domain's name servers). The hosts file is read
// for the name unrooted, which is how it is written there.
func SystemLookup(ctx context.Context, network, host string) ([]netip.Addr, error) {
	name := strings.TrimSuffix(host, ".")
	if addrs, err := filesOnly.LookupNetIP(ctx, network, name); err == nil && len(addrs) > 0 {
		return addrs, nil
	}
	return net.DefaultResolver.LookupNetIP(ctx, network, name+".")
}

// filesOnly is a resolver that answers from the hosts file alone: its
// DNS connections fail before any query leaves.
var filesOnly = &net.Resolver{PreferGo: true, Dial: func(context.Context, string, string) (net.Conn, error) {
	return nil, errNoDNS
}}

var errNoDNS = errors.New("hosts file only")

// resolver turns a granted name into the addresses that may be dialled.
type resolver struct {
	hosts  Hosts
	lookup LookupFunc
}

// resolve returns the addresses of name (of network "ip", "ip4" or "ip6")
// that may be dialled: its pins, or the upstream's answers with every
// forbidden address removed. It fails when nothing dialable is left,
// saying why.
func (r *resolver) resolve(ctx context.Context, network, name string) ([]netip.Addr, error) {
	if pins, ok := r.hosts[name]; ok {
		return pins, nil
	}
	addrs, err := r.lookup(ctx, network, name)
	if err != nil {
		// The sandbox sees this error: it names the name, not the host's
		// resolver.
		var de *net.DNSError
		if errors.As(err, &de) {
			quiet := *de
			quiet.Server, quiet.Name = "", name
			err = &quiet
		}
		return nil, fmt.Errorf("resolving %s: %w", name, err)
	}
	out := make([]netip.Addr, 0, len(addrs))
	var why string
	for _, a := range addrs {
		a = a.WithZone("")
		if reason, bad := Forbidden(a); bad {
			why = fmt.Sprintf("%s resolves to %s (%s)", name, a, reason)
			continue
		}
		out = append(out, a.Unmap())
	}
	if len(out) == 0 {
		if why == "" {
			why = name + " has no addresses"
		}
		return nil, policyError(why)
	}
	return out, nil
}
