//go:build !lean

package main

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/approve"
	"github.com/airlock-sandbox/airlock/internal/httpguard"
	"github.com/airlock-sandbox/airlock/internal/jobs"
	"github.com/airlock-sandbox/airlock/internal/mcpwrap"
)

func init() { commands["mcp-wrap"].run = mcpWrapCmd }

// mcpWrapStart bounds the wrapped server's start and MCP handshake.
const mcpWrapStart = 2 * time.Minute

// mcpWrapOutput bounds what a wrapped server writes over its lifetime.
const mcpWrapOutput = 1 << 30

func mcpWrapCmd(ctx context.Context, e *env) int {
	c := commands["mcp-wrap"]
	fs := e.flags(c)
	// The flags of a command job that runs attached on the process or
	// gVisor tier (the others refuse attached jobs); its life is
	// --max-lifetime's, not --wall's.
	var jf jobFlags
	onlyFlags(fs, func(fs *flag.FlagSet) { jf.register(fs, false) },
		"tier", "situation", "memory", "output", "allow-read", "read", "read-at", "copy", "allow-net", "scratch", "allow-spawn", "image", "secret", "env", "file")
	var rf routerFlags // the tiers' flags; --policy here is the tool policy
	rf.tiers.registerOnly(fs, "process-pool", "gvisor-pool", "image-pool", "hosts", "egress-log", "images", "registry-auth")
	policyFile := fs.String("policy", "", "per-tool policy `FILE` (YAML or JSON: default, max_args_bytes, roots, path_args, refuse, tools: NAME: allow, approval, max_args_bytes, rate_per_minute, path_args, roots, refuse; see docs/mcp-wrap.md)")
	var outHosts stringList
	fs.Var(&outHosts, "output-host", "a `HOST` links and images in results may point to (repeatable; default: none)")
	auditFile := fs.String("audit", "", "append every call and decision to `FILE` as JSON lines")
	callTimeout := fs.Duration("call-timeout", mcpwrap.DefaultCallTimeout, "how long (`DURATION`) one tools/call may take")
	maxResult := fs.Int("max-result", mcpwrap.DefaultMaxResultBytes, "cap on a result's text in `BYTES`")
	keyFile := fs.String("approval-key", "", "approval key `FILE` (at least 32 bytes, mode 600) that signs and checks tokens for tools with approval: true")
	approveTool := fs.String("approve", "", "print an approval token for calling `TOOL` with --args on this server, and exit")
	approveArgs := fs.String("args", "{}", "the arguments (`JSON`) --approve approves")
	approveTenant := fs.String("approval-tenant", "", "the `TENANT` an --approve token is for: a tenant of airlock serve whose wrapped server this is, signed with the server's approvals.key_file (default: a local mcp-wrap)")
	approveTTL := fs.Duration("approval-ttl", 15*time.Minute, "how long (`DURATION`) an --approve token holds")
	maxLifetime := fs.Duration("max-lifetime", 24*time.Hour, "the longest `DURATION` the wrapped server's sandbox lives (its wall clock and CPU limit)")
	idleTimeout := fs.Duration("idle-timeout", 0, "end the wrapped server once no request has come for `DURATION` (default 0: never)")
	httpAddr := fs.String("http", "", "serve streamable HTTP on this loopback `ADDR` (HOST:PORT) at /mcp instead of stdio; needs --http-key")
	httpKey := fs.String("http-key", "", "bearer key `FILE` (mode 600) that HTTP clients must send as Authorization: Bearer KEY")
	pos, rest, code, ok := e.parse(fs)
	if !ok {
		return code
	}
	if len(pos) > 0 || len(rest) == 0 {
		return e.missingArgs("takes the server's command after --: airlock mcp-wrap [flags] -- CMD [ARGS...]")
	}
	if err := wrapFlagsAgree(fs, *approveTool != "", *callTimeout, *maxResult, *approveTTL, *maxLifetime, *idleTimeout); err != nil {
		return e.fail(err)
	}
	var signer *approve.Signer
	if *keyFile != "" {
		key, err := readKeyFile(*keyFile)
		if err == nil {
			signer, err = approve.NewSigner(key)
		}
		if err != nil {
			return e.fail(jobs.Invalid("approval-key", "%v", err))
		}
	}
	if *approveTool != "" {
		if signer == nil {
			return e.fail(jobs.Invalid("approve", "needs --approval-key"))
		}
		tok, err := mcpwrap.Issue(signer, *approveTenant, rest, *approveTool, json.RawMessage(*approveArgs), *approveTTL, time.Now())
		if err != nil {
			return e.fail(jobs.Invalid("args", "%v", err))
		}
		fmt.Fprintln(e.stdout, tok)
		return exitOK
	}
	var bearer []byte
	if *httpAddr != "" || *httpKey != "" {
		var err error
		if bearer, err = httpBearer(*httpAddr, *httpKey); err != nil {
			return e.fail(err)
		}
	}
	var policy mcpwrap.Policy
	if *policyFile != "" {
		var err error
		if policy, err = mcpwrap.LoadPolicy(*policyFile); err != nil {
			return e.fail(jobs.Invalid("policy", "%v", err))
		}
	}
	job := airlock.Job{Kind: airlock.KindCommand, Argv: rest}
	// The server's sandbox lives as long as the agent's session, up to
	// its lifetime: the wall clock (which bounds an attached job's life)
	// and the CPU it may use are the lifetime, and the tiers are built to
	// admit it; its output (every byte it writes) is bounded by
	// mcpWrapOutput rather than a one-shot job's default.
	life := max(*maxLifetime, time.Second).Milliseconds()
	rf.limits = airlock.DefaultLimitPolicy()
	rf.limits.Max.WallMS = max(rf.limits.Max.WallMS, life)
	rf.limits.Max.CPUMS = max(rf.limits.Max.CPUMS, life)
	rf.limits.Max.OutputBytes = max(rf.limits.Max.OutputBytes, mcpWrapOutput)
	job.Limits = airlock.Limits{WallMS: life, CPUMS: life, OutputBytes: mcpWrapOutput}
	if err := jf.apply(&job); err != nil {
		return e.fail(err)
	}
	var audit func(mcpwrap.Record)
	if *auditFile != "" {
		f, err := os.OpenFile(*auditFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return e.fail(jobs.Invalid("audit", "%v", err))
		}
		defer f.Close()
		audit = mcpwrap.JSONLines(f)
	}
	r, closeAll, err := rf.open()
	if err != nil {
		return e.fail(err)
	}
	defer closeAll()
	if s := impliedSituation(r, &job); s != "" {
		job.Situation = s
	}
	tier, err := r.Route(&job)
	if err != nil {
		return e.fail(err)
	}
	at, ok := tier.(airlock.Attacher)
	if !ok {
		return e.fail(&airlock.NotAdmitted{Tier: tier.Name(), Reason: "cannot run a job attached"})
	}
	// Each message the SDK decodes allocates a 32 KiB buffer, on both of
	// the relay's sides, while what the relay keeps is small: collecting
	// less often takes about 40 % off the wrapper's share of a call
	// (BenchmarkRelaySandboxed). An explicit GOGC still wins.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	w, err := mcpwrap.Start(ctx, at, job, mcpwrap.Config{
		Argv: rest, Policy: policy, OutputHosts: outHosts, CallTimeout: *callTimeout,
		MaxResultBytes: *maxResult, IdleTimeout: *idleTimeout, Signer: signer, Audit: audit,
		Stderr: e.stderr,
	}, mcpWrapStart)
	if err != nil {
		return e.fail(err)
	}
	defer w.Close()
	w.Event("start", fmt.Sprintf("%s on %s", rest[0], tier.Name()))
	// The relay ends when the agent hangs up (stdio), on a signal, or when
	// the wrapped server ends (its lifetime, idleness, a crash): the
	// agent's client then sees the server gone and may start it again.
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		select {
		case <-w.Done():
		case <-sctx.Done():
		}
		stop()
	}()
	var rerr error
	if *httpAddr != "" {
		rerr = serveWrapHTTP(sctx, e, w.Server(), *httpAddr, bearer)
	} else {
		// A line the SDK would end the session over (the model wrote
		// arguments nested too deep, say) is refused alone, as by airlock mcp.
		rerr = w.Server().Run(sctx, stdioTransport(e.stdin, e.stdout, mcp.DefaultMaxLineLength))
	}
	if end := w.Err(); end != nil {
		return e.fail(end)
	}
	if rerr != nil && ctx.Err() == nil && !errors.Is(rerr, io.EOF) && !errors.Is(rerr, context.Canceled) {
		return e.fail(rerr)
	}
	return exitOK
}

// wrapFlagsAgree refuses mcp-wrap's durations and sizes out of range, and
// the flags of issuing a token (--approve) given without it, which would
// otherwise be ignored.
func wrapFlagsAgree(fs *flag.FlagSet, approving bool, callTimeout time.Duration, maxResult int, ttl, lifetime, idle time.Duration) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "args", "approval-tenant", "approval-ttl":
			if !approving && err == nil {
				err = jobs.Invalid(f.Name, "is for --approve TOOL (issuing a token), which is not given")
			}
		}
	})
	switch {
	case err != nil:
		return err
	case callTimeout <= 0:
		return jobs.Invalid("call-timeout", "want a duration above 0, such as 60s")
	case maxResult <= 0:
		return jobs.Invalid("max-result", "want a number of bytes above 0")
	case ttl <= 0:
		return jobs.Invalid("approval-ttl", "want a duration above 0, such as 15m")
	case lifetime < time.Second:
		return jobs.Invalid("max-lifetime", "want a lifetime of at least 1s")
	case idle < 0:
		return jobs.Invalid("idle-timeout", "want 0 (never) or a duration above 0")
	}
	return nil
}

// httpBearer checks mcp-wrap's HTTP flags and returns the key clients
// must send. The address must be loopback: the relay has no TLS, and a
// server for other machines is airlock serve's mcp_wrapped.
func httpBearer(addr, keyFile string) ([]byte, error) {
	if addr == "" {
		return nil, jobs.Invalid("http-key", "is for --http")
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, jobs.Invalid("http", "want HOST:PORT: %v", err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, jobs.Invalid("http", "%s is not a loopback address; to serve wrapped tools to other machines use airlock serve (mcp_wrapped)", addr)
	}
	if keyFile == "" {
		return nil, jobs.Invalid("http", "needs --http-key FILE, a bearer key (mode 600) that clients send as Authorization: Bearer KEY")
	}
	key, err := readKeyFile(keyFile)
	if err == nil && len(bytes.TrimSpace(key)) < 16 {
		err = errors.New("want a key of at least 16 characters")
	}
	if err != nil {
		return nil, jobs.Invalid("http-key", "%v", err)
	}
	return bytes.TrimSpace(key), nil
}

// wrapSessionTimeout closes a client's MCP session on mcp-wrap --http
// once it has sent no request for this long (as airlock mcp --http's
// default session TTL): a client that goes away without DELETE would
// otherwise hold one of the sessions for good.
const wrapSessionTimeout = 10 * time.Minute

// serveWrapHTTP serves srv as streamable HTTP at /mcp on addr until ctx
// ends. Every request carries the bearer key; the SDK refuses a loopback
// request with another Host (DNS rebinding) and the cross-origin check a
// browser's request from another site. What one client may hold is
// bounded as airlock serve bounds it (httpguard): headers and body must
// arrive in time, and at most httpguard.MaxMCPSessions sessions are open.
func serveWrapHTTP(ctx context.Context, e *env, srv *mcp.Server, addr string, key []byte) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listening: %w", err)
	}
	hs := httpguard.NewServer(wrapHTTPHandler(srv, key, httpguard.BodyReadTimeout))
	fmt.Fprintf(e.stderr, "airlock: MCP on http://%s/mcp\n", ln.Addr())
	go func() { <-ctx.Done(); _ = hs.Close() }()
	if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// wrapHTTPHandler is mcp-wrap's /mcp: srv behind the bearer key, with
// request bodies given bodyTimeout to arrive and new sessions refused
// (429) past httpguard.MaxMCPSessions.
func wrapHTTPHandler(srv *mcp.Server, key []byte, bodyTimeout time.Duration) http.Handler {
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{CrossOriginProtection: http.NewCrossOriginProtection(), MaxRequestBodyBytes: 4 << 20, SessionTimeout: wrapSessionTimeout})
	want := append([]byte("Bearer "), key...)
	var room httpguard.MCPRoom
	mux := http.NewServeMux()
	mux.HandleFunc("/mcp", func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="airlock mcp-wrap"`)
			w.Header().Set("Connection", "close")
			http.Error(w, "a bearer key is needed (Authorization: Bearer KEY, the key of --http-key)", http.StatusUnauthorized)
			return
		}
		if r.Method == http.MethodPost && r.Header.Get("Mcp-Session-Id") == "" {
			done, n, ok := room.Enter(srv)
			if !ok {
				w.Header().Set("Retry-After", "5")
				http.Error(w, fmt.Sprintf("%d MCP sessions are open or opening (the maximum is %d); end one with DELETE, or wait until one is idle for %v", n, httpguard.MaxMCPSessions, wrapSessionTimeout), http.StatusTooManyRequests)
				return
			}
			defer done()
		}
		h.ServeHTTP(w, r)
	})
	return httpguard.BodyDeadline(mux, func() time.Duration { return bodyTimeout })
}

// readKeyFile reads a secret key file, refusing one that group or others
// may read, as the server's approvals.key_file is read.
func readKeyFile(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if m := st.Mode().Perm(); m&0o077 != 0 {
		return nil, fmt.Errorf("%s is accessible by group or others (mode %04o); chmod 600 it", name, m)
	}
	return io.ReadAll(io.LimitReader(f, 1<<20))
}
