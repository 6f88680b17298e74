package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/airlock-sandbox/airlock/internal/egressfwd"
)

func init() {
	register(&command{
		name:    "egress-forward",
		summary: "carry a sandbox's proxy and DNS traffic to the egress gateway's Unix socket",
		usage:   "egress-forward [--dns | --serve] SOCKET",
		run:     runEgressForward,
	})
}

// runEgressForward has two modes. By default one connection arrives on
// stdin/stdout (QEMU guestfwd=tcp:...-cmd:airlock egress-forward SOCKET)
// and is carried to the gateway as an HTTP proxy stream, or as a DNS
// stream with --dns. With --serve it runs the in-sandbox forwarder on
// loopback (127.0.0.1:3128 and 127.0.0.1:53) until stopped.
func runEgressForward(ctx context.Context, e *env) int {
	c := commands["egress-forward"]
	fs := e.flags(c)
	dns := fs.Bool("dns", false, "the connection carries DNS over TCP rather than HTTP proxy traffic")
	serve := fs.Bool("serve", false, "listen on loopback inside the sandbox instead of using stdin/stdout")
	pos, rest, code, ok := e.parse(fs)
	if !ok {
		return code
	}
	pos = append(pos, rest...)
	if len(pos) != 1 || (*dns && *serve) {
		fmt.Fprintf(e.stderr, "usage: airlock %s\n", c.usage)
		return exitUsage
	}
	if *serve {
		if err := egressfwd.RunForwarder(ctx, pos[0]); err != nil {
			return e.fail(err)
		}
		return exitOK
	}
	kind := egressfwd.StreamHTTP
	if *dns {
		kind = egressfwd.StreamDNS
	}
	var out io.WriteCloser = nopWriteCloser{e.stdout}
	if f, ok := e.stdout.(*os.File); ok {
		out = f // closing it tells QEMU the connection is done
	}
	if err := egressfwd.ForwardStdio(pos[0], kind, e.stdin, out); err != nil {
		return e.fail(err)
	}
	return exitOK
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
