//go:build !lean

package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net"

	"github.com/airlock-sandbox/airlock/internal/jobs"
	"github.com/airlock-sandbox/airlock/server"
)

func init() { commands["serve"].run = serveCmd }

func serveCmd(ctx context.Context, e *env) int {
	c := commands["serve"]
	fs := e.flags(c)
	config := fs.String("config", "", "server configuration `FILE` (YAML or JSON; see docs/server.md)")
	listen := fs.String("listen", "", "`ADDR` to listen on (default: the configuration's, else 127.0.0.1:8420)")
	newKey := fs.Bool("new-key", false, "print a fresh random API key and its SHA-256, then exit")
	var tf tierFlags
	tf.register(fs)
	pos, _, code, ok := e.parse(fs)
	if !ok {
		return code
	}
	if *newKey {
		key, err := randomKey()
		if err != nil {
			return e.fail(err)
		}
		fmt.Fprintf(e.stdout, "key:        %s\nkey_sha256: %s\n", key, server.HashKey(key))
		return exitOK
	}
	if *config == "" || len(pos) > 0 {
		return e.fail(jobs.Invalid("", "serve takes --config FILE and no arguments (see `airlock help serve`)"))
	}
	cfg, err := server.LoadConfig(*config)
	if err != nil {
		return e.fail(jobs.Invalid("config", "%s", err.Error()))
	}
	addr := *listen
	if addr == "" {
		addr = cfg.Listen
	}
	if addr == "" {
		addr = "127.0.0.1:8420"
	}
	srv, err := newServer(cfg, &tf, server.Options{})
	if err != nil {
		return e.fail(err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		srv.Close()
		return e.fail(fmt.Errorf("listening: %w", err))
	}
	fmt.Fprintf(e.stderr, "airlock: serving on http://%s (tiers: %s)\n", ln.Addr(), tierNames(srv))
	if err := srv.Serve(ctx, ln); err != nil {
		return e.fail(err)
	}
	fmt.Fprintln(e.stderr, "airlock: stopped")
	return exitOK
}

func tierNames(srv *server.Server) string {
	var s string
	for i, t := range srv.Router().Tiers() {
		if i > 0 {
			s += ", "
		}
		s += t.Name()
		if srv.Router().Unavailable(t.Name()) != nil {
			s += " (unavailable)"
		}
	}
	return s
}

// randomKey returns 32 random bytes, URL-safe base64: an API key whose
// SHA-256 can be stored without a slow hash.
func randomKey() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return "ak_" + base64.RawURLEncoding.EncodeToString(b[:]), nil
}
