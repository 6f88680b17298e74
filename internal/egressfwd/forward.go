// Package egressfwd is the sandbox's side of the egress wire: a forwarder
// that runs inside a sandbox with only loopback and carries HTTP proxy
// connections and DNS queries to the egress gateway's Unix socket, and the
// one-connection form QEMU's guestfwd gives a program. It holds no policy
// and imports nothing of egress, so an in-sandbox init can run it without
// the gateway's code; setting loopback up is Linux only.
package egressfwd

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/connset"
)

// The wire as the gateway (package egress) defines it: the first byte of
// a stream on its socket says what the stream carries, and the addresses
// a sandboxed job is told to use. A test keeps them equal to egress's.
const (
	StreamHTTP byte = 'H' // an HTTP proxy connection (plain requests and CONNECT)
	StreamDNS  byte = 'D' // DNS over TCP framing (two-byte length, message)

	SandboxProxyAddr = "127.0.0.1:3128"
	SandboxDNSAddr   = "127.0.0.1:53"
)

// maxDNSMessage is the largest UDP query the forwarder reads, as the
// gateway bounds a DNS message.
const maxDNSMessage = 4096

// ForwarderConfig says where the in-sandbox forwarder listens.
type ForwarderConfig struct {
	HTTP string // TCP address for HTTP proxying (default SandboxProxyAddr)
	DNS  string // UDP and TCP address for DNS (default SandboxDNSAddr; "-" for none)
}

// Forwarder runs inside a sandbox that has only loopback: it listens on
// loopback for HTTP proxy connections and DNS queries and carries each to
// the gateway's Unix socket. It holds no policy: everything is decided by
// the gateway outside the sandbox.
type Forwarder struct {
	socket string
	lns    []net.Listener
	pc     net.PacketConn
	wg     sync.WaitGroup
	once   sync.Once
	conns  connset.Set
	cancel context.CancelFunc
}

// StartForwarder brings loopback up (best effort: a fresh network
// namespace has it down) and starts listening. It fails if an address
// cannot be bound.
func StartForwarder(ctx context.Context, socket string, cfg ForwarderConfig) (*Forwarder, error) {
	if cfg.HTTP == "" {
		cfg.HTTP = SandboxProxyAddr
	}
	if cfg.DNS == "" {
		cfg.DNS = SandboxDNSAddr
	}
	_ = LoopbackUp()
	ctx, cancel := context.WithCancel(ctx)
	f := &Forwarder{socket: socket, cancel: cancel}
	fail := func(err error) (*Forwarder, error) {
		f.Close()
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.HTTP)
	if err != nil {
		return fail(fmt.Errorf("forwarder: %w", err))
	}
	f.lns = append(f.lns, ln)
	f.acceptLoop(ln, StreamHTTP)
	if cfg.DNS != "-" {
		var tln net.Listener
		if f.pc, tln, err = connset.ListenDNS(cfg.DNS); err != nil {
			return fail(fmt.Errorf("forwarder: %w", err))
		}
		f.lns = append(f.lns, tln)
		f.acceptLoop(tln, StreamDNS)
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			f.udpLoop()
		}()
	}
	go func() {
		<-ctx.Done()
		f.Close()
	}()
	return f, nil
}

// RunForwarder runs a forwarder on the default loopback addresses until
// ctx ends: the call a tier's in-sandbox init makes.
func RunForwarder(ctx context.Context, socket string) error {
	f, err := StartForwarder(ctx, socket, ForwarderConfig{})
	if err != nil {
		return err
	}
	<-ctx.Done()
	return f.Close()
}

// HTTPAddr returns the address the forwarder proxies HTTP on.
func (f *Forwarder) HTTPAddr() net.Addr { return f.lns[0].Addr() }

// DNSAddr returns the UDP address the forwarder answers DNS on, or nil.
func (f *Forwarder) DNSAddr() net.Addr {
	if f.pc == nil {
		return nil
	}
	return f.pc.LocalAddr()
}

// Close stops listening and ends the streams in flight.
func (f *Forwarder) Close() error {
	f.once.Do(func() {
		f.cancel()
		for _, ln := range f.lns {
			ln.Close()
		}
		if f.pc != nil {
			f.pc.Close()
		}
		f.conns.CloseAll()
		f.wg.Wait()
	})
	return nil
}

func (f *Forwarder) acceptLoop(ln net.Listener, kind byte) {
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		f.conns.Serve(ln, func(c net.Conn) { _ = Splice(c, f.socket, kind) })
	}()
}

// udpLoop carries each UDP query to the gateway as a one-message DNS
// stream and sends the answer back.
func (f *Forwarder) udpLoop() {
	buf := make([]byte, maxDNSMessage)
	for {
		n, from, err := f.pc.ReadFrom(buf)
		if err != nil {
			return
		}
		q := append([]byte(nil), buf[:n]...)
		go func() {
			if ans, err := exchangeDNS(f.socket, q); err == nil {
				_, _ = f.pc.WriteTo(ans, from)
			}
		}()
	}
}

func exchangeDNS(socket string, q []byte) ([]byte, error) {
	c, err := net.DialTimeout("unix", socket, 5*time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte{StreamDNS}); err != nil {
		return nil, err
	}
	if err := connset.WriteFramed(c, q); err != nil {
		return nil, err
	}
	var lenBuf [2]byte
	if _, err := io.ReadFull(c, lenBuf[:]); err != nil {
		return nil, err
	}
	ans := make([]byte, binary.BigEndian.Uint16(lenBuf[:]))
	if _, err := io.ReadFull(c, ans); err != nil {
		return nil, err
	}
	return ans, nil
}

// Splice connects to the gateway's Unix socket, announces the stream's
// kind and copies bytes both ways between c and the gateway: until the
// client has sent everything and the gateway has answered, or until the
// gateway ends the stream (then at most lingerAfterGateway more, for the
// client to close its side). c is closed on return.
func Splice(c io.ReadWriteCloser, socket string, kind byte) error {
	defer c.Close()
	g, err := net.DialTimeout("unix", socket, 5*time.Second)
	if err != nil {
		return fmt.Errorf("reaching the egress gateway: %w", err)
	}
	defer g.Close()
	if _, err := g.Write([]byte{kind}); err != nil {
		return fmt.Errorf("reaching the egress gateway: %w", err)
	}
	sent := make(chan error, 1)     // the client's side, to the gateway
	answered := make(chan error, 1) // the gateway's side, to the client
	go func() {
		_, err := io.Copy(g, c)
		if cw, ok := g.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		sent <- err
	}()
	go func() {
		_, err := io.Copy(c, g)
		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		answered <- err
	}()
	select {
	case err = <-sent:
		// The client has sent everything (a half-close): its answer
		// still comes.
		if err2 := <-answered; err == nil {
			err = err2
		}
	case err = <-answered:
		// The gateway has ended the stream and reads nothing more. The
		// client gets a moment to close its side (so that closing ours
		// does not reset the connection under the answer), not more: a
		// client holding its side open must not hold this stream, or the
		// process QEMU's guestfwd starts for it, for ever.
		select {
		case <-sent:
		case <-time.After(lingerAfterGateway):
		}
	}
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// lingerAfterGateway is how long Splice waits, once the gateway has ended
// a stream, for the client to end its side.
const lingerAfterGateway = 2 * time.Second

// stdio joins a reader and a writer into one stream, for ForwardStdio.
type stdio struct {
	io.Reader
	io.Writer
	closeOut func() error
}

func (s stdio) Close() error { return s.closeOut() }

// ForwardStdio carries one connection whose bytes arrive on in and leave
// on out to the gateway's Unix socket: the form QEMU's
// guestfwd=...-cmd:PROGRAM gives a program (one process per connection).
func ForwardStdio(socket string, kind byte, in io.Reader, out io.WriteCloser) error {
	return Splice(stdio{Reader: in, Writer: out, closeOut: out.Close}, socket, kind)
}
