//go:build linux

package agent

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/tiers/microvm/internal/wire"
)

// setupNet configures the guest's network interface for a job granted
// egress: loopback and the one virtio-net interface up, its address set
// (the kernel adds only the subnet's route; there is no default route),
// and the egress gateway's CA written where the job's trust variables
// point. It runs before the root turns read-only.
func setupNet(n *wire.Net) error {
	pfx, err := netip.ParsePrefix(n.Addr)
	if err != nil || !pfx.Addr().Is4() {
		return fmt.Errorf("guest address %q: want an IPv4 CIDR", n.Addr)
	}
	dev, err := waitInterface(3 * time.Second)
	if err != nil {
		return err
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	addr := pfx.Addr().As4()
	var mask [4]byte
	for i := range mask {
		bits := max(min(pfx.Bits()-8*i, 8), 0)
		mask[i] = byte(0xff << (8 - bits))
	}
	for _, step := range []struct {
		req uint
		val []byte
	}{{unix.SIOCSIFADDR, addr[:]}, {unix.SIOCSIFNETMASK, mask[:]}} {
		ifr, err := unix.NewIfreq(dev)
		if err != nil {
			return err
		}
		if err := ifr.SetInet4Addr(step.val); err != nil {
			return err
		}
		if err := unix.IoctlIfreq(fd, step.req, ifr); err != nil {
			return fmt.Errorf("configuring %s: %w", dev, err)
		}
	}
	for _, name := range []string{"lo", dev} {
		if err := linkUp(fd, name); err != nil {
			return fmt.Errorf("bringing %s up: %w", name, err)
		}
	}
	if n.CAPath != "" {
		if err := os.MkdirAll(filepath.Dir(n.CAPath), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(n.CAPath, n.CA, 0o644); err != nil {
			return fmt.Errorf("placing the egress CA: %w", err)
		}
	}
	return nil
}

// waitInterface returns the first network interface other than loopback,
// waiting for the driver to register it.
func waitInterface(wait time.Duration) (string, error) {
	deadline := time.Now().Add(wait)
	for {
		ents, _ := os.ReadDir("/sys/class/net")
		for _, e := range ents {
			if e.Name() != "lo" {
				return e.Name(), nil
			}
		}
		if time.Now().After(deadline) {
			return "", errors.New("no network interface appeared")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func linkUp(fd int, name string) error {
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}
