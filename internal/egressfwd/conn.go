package egressfwd

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
)

// The helpers below mirror the gateway's own in package egress, which
// this package does not import.

// tracker holds open connections so Close can end them.
type tracker struct {
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

func (t *tracker) add(c net.Conn) bool {
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

// serve accepts connections until ln closes, handling each in its own
// goroutine while tracking it.
func (t *tracker) serve(ln net.Listener, handle func(net.Conn)) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		if !t.add(c) {
			c.Close()
			return
		}
		go func() {
			defer t.remove(c)
			handle(c)
		}()
	}
}

func (t *tracker) remove(c net.Conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.conns, c)
}

func (t *tracker) closeAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	for c := range t.conns {
		c.Close()
	}
}

// listenDNS listens on UDP and TCP on the same address. With port 0 it
// retries a few times if the port the system chose for UDP is taken for
// TCP.
func listenDNS(addr string) (net.PacketConn, net.Listener, error) {
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

func writeFramed(w io.Writer, msg []byte) error {
	b := make([]byte, 2+len(msg))
	binary.BigEndian.PutUint16(b, uint16(len(msg)))
	copy(b[2:], msg)
	_, err := w.Write(b)
	return err
}
