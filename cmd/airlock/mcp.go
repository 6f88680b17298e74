//go:build !lean

package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"

	"github.com/airlock-sandbox/airlock/internal/httpguard"
	"github.com/airlock-sandbox/airlock/internal/jobs"
	"github.com/airlock-sandbox/airlock/server"
)

func init() { commands["mcp"].run = mcpCmd }

func mcpCmd(ctx context.Context, e *env) int {
	c := commands["mcp"]
	fs := e.flags(c)
	config := fs.String("config", "", "server configuration `FILE` (default: one local tenant with the default limits)")
	tenant := fs.String("tenant", "", "the tenant `NAME` the stdio tools run as (default: the first in the configuration)")
	httpAddr := fs.String("http", "", "serve streamable HTTP on `ADDR` instead of stdio")
	spawn := fs.Bool("allow-spawn", false, "let the local tenant's command jobs start other programs (with --config, set mcp_spawn per tenant)")
	var tf tierFlags
	tf.register(fs)
	pos, _, code, ok := e.parse(fs)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return e.fail(jobs.Invalid("", "mcp takes no arguments"))
	}
	var cfg server.Config
	switch {
	case *config != "" && *spawn:
		return e.fail(jobs.Invalid("allow-spawn", "with --config, set mcp_spawn on the tenant instead"))
	case *config != "":
		var err error
		if cfg, err = server.LoadConfig(*config); err != nil {
			return e.fail(jobs.Invalid("config", "%s", err.Error()))
		}
	case *httpAddr != "":
		return e.fail(jobs.Invalid("config", "MCP over HTTP needs --config with tenants and their keys"))
	default:
		key, err := randomKey() // never shown: stdio needs no key
		if err != nil {
			return e.fail(err)
		}
		cfg = server.Config{Tenants: []server.Tenant{{Name: "local", KeySHA256: server.HashKey(key), MCPSpawn: *spawn}}, Images: localImages(tf.images)}
		if tf.account != "" {
			// The local tenant reaches the account --account names.
			cfg.Accounts = []server.Account{{Name: tf.account}}
			cfg.Tenants[0].Accounts = []string{tf.account}
		}
	}
	srv, err := newServer(cfg, &tf, server.Options{})
	if err != nil {
		return e.fail(err)
	}
	defer srv.Close()
	if *httpAddr != "" {
		ln, err := net.Listen("tcp", *httpAddr)
		if err != nil {
			return e.fail(fmt.Errorf("listening: %w", err))
		}
		mux := http.NewServeMux()
		mux.Handle("/mcp", srv.MCPHandler())
		hs := httpguard.NewServer(mux)
		fmt.Fprintf(e.stderr, "airlock: MCP on http://%s/mcp\n", ln.Addr())
		go func() { <-ctx.Done(); _ = hs.Close() }()
		if err := hs.Serve(ln); err != nil && err != http.ErrServerClosed {
			return e.fail(err)
		}
		return exitOK
	}
	name := *tenant
	if name == "" {
		name = cfg.Tenants[0].Name
	}
	ms, err := srv.MCP(name)
	if err != nil {
		return e.fail(jobs.Invalid("tenant", "%s", err.Error()))
	}
	t := stdioTransport(e.stdin, e.stdout, server.MCPMaxRequest)
	if err := ms.Run(ctx, t); err != nil && ctx.Err() == nil && err != io.EOF {
		return e.fail(fmt.Errorf("mcp: %w", err))
	}
	return exitOK
}
