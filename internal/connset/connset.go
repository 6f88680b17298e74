// Package connset holds what the egress gateway and the in-sandbox
// forwarder share for the connections they serve: a set of open
// connections closed together, a DNS listener pair, and DNS-over-TCP
// framing. It imports nothing of the project, so the forwarder stays
// small.
package connset

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
)

// Set holds open connections so CloseAll can end them. The zero Set is
// ready to use.
type Set struct {
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// Add tracks c; it returns false once the set is closed.
func (t *Set) Add(c net.Conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	if t.conns == nil {
		t.conns = map[net.Conn]struct{}{}
	}
	t.conns[c] = struct{}{}
	return true
}

// Serve accepts connections until ln closes, handling each in its own
// goroutine while tracking it.
func (t *Set) Serve(ln net.Listener, handle func(net.Conn)) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		if !t.Add(c) {
			c.Close()
			return
		}
		go func() {
			defer t.Remove(c)
			handle(c)
		}()
	}
}

// Remove stops tracking c.
func (t *Set) Remove(c net.Conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.conns, c)
}

// CloseAll closes every tracked connection and refuses new ones.
func (t *Set) CloseAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	for c := range t.conns {
		c.Close()
	}
}

// ListenDNS listens on UDP and TCP on the same address. With port 0 it
// retries a few times if the port the system chose for UDP is taken for
// TCP.
func ListenDNS(addr string) (net.PacketConn, net.Listener, error) {
	_, port, _ := net.SplitHostPort(addr)
	for attempt := 0; ; attempt++ {
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			return nil, nil, fmt.Errorf("listening on udp %s: %w", addr, err)
		}
		ln, err := net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			return pc, ln, nil
		}
		pc.Close()
		if port != "0" || attempt == 9 {
			return nil, nil, fmt.Errorf("listening on tcp %s: %w", addr, err)
		}
	}
}

// WriteFramed writes msg with DNS over TCP's two-byte length prefix.
func WriteFramed(w io.Writer, msg []byte) error {
	b := make([]byte, 2+len(msg))
	binary.BigEndian.PutUint16(b, uint16(len(msg)))
	copy(b[2:], msg)
	_, err := w.Write(b)
	return err
}
