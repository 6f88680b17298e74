// Package egresswire starts a job's egress gateway for a sandbox tier that
// reaches it through a Unix socket in a directory bound into the sandbox
// (process, gVisor): the gateway listens on DIR/egress.sock, its CA
// certificate is placed at DIR/ca.pem, and every decision is kept for the
// job's Result.Decision as well as handed to the operator's log.
package egresswire

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/internal/egressfwd"
	"github.com/airlock-sandbox/airlock/internal/replacefile"
	"github.com/airlock-sandbox/airlock/internal/value"
)

// File names in the bound directory.
const (
	Socket = "egress.sock"
	CA     = "ca.pem"
)

// Template makes cfg a per-run template, as the tiers' WithEgress take it:
// its listeners and rules are dropped (each run brings its own), its pins
// copied.
func Template(cfg egress.Config) *egress.Config {
	cfg.Socket, cfg.Listen, cfg.DNS, cfg.Rules = "", "", "", nil
	cfg.Hosts = maps.Clone(cfg.Hosts)
	return &cfg
}

// ForRun is tmpl (nil: the defaults) for one run: its rules, and job
// naming it in the log unless tmpl names one.
func ForRun(tmpl *egress.Config, job string, rules []airlock.NetRule) egress.Config {
	var cfg egress.Config
	if tmpl != nil {
		cfg = *tmpl
	}
	if cfg.Job == "" {
		cfg.Job = job
	}
	cfg.Rules = rules
	return cfg
}

// Bounds of the decisions kept for Result.Decision: the job decides how
// many requests it makes and how long their paths are, and the decisions
// are held in memory until the run ends, then written into its result and
// audit record. The first and the last MaxDecisions/2 are kept, so that
// neither a flood before nor one after hides what a job did at its start
// and its end; the operator's log (Config.Log) still receives every one.
const (
	MaxDecisions    = 500
	maxDecisionLine = 1024 // bytes
)

// MaxLoggedRefusals bounds the refusals of one job the operator's log
// (Config.Log) receives: a job refusing itself in a loop would otherwise
// write records as fast as it can make requests. Past it refusals are
// counted, and one record at the end of the run says how many were not
// logged; every allowed request is still logged.
const MaxLoggedRefusals = 1000

// Gateway is one job's gateway and the decisions it logged.
type Gateway struct {
	gw      *egress.Gateway
	sink    func(egress.Record) // the operator's log (nil: none)
	job     string
	mu      sync.Mutex
	log     []string // the first MaxDecisions/2
	tail    []string // then the last MaxDecisions/2, a ring from next
	next    int
	dropped int // decisions between the two
	refused int // refusals sent to sink
	quiet   int // refusals past MaxLoggedRefusals, not sent
	closed  bool
}

// Start starts the gateway cfg describes (its Socket is set here) in
// hostDir, which the sandbox sees at sandboxDir, and places the CA there.
// It returns the environment the sandboxed program needs. cfg.Log, if set,
// still receives every decision.
func Start(ctx context.Context, cfg egress.Config, hostDir, sandboxDir string) (*Gateway, []string, error) {
	cfg.Socket = filepath.Join(hostDir, Socket)
	g, err := New(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	gw := g.gw
	if err := placeCA(hostDir, gw.CACertPEM()); err != nil {
		gw.Close()
		return nil, nil, fmt.Errorf("placing the egress CA: %w", err)
	}
	return g, egress.SandboxEnv(path.Join(sandboxDir, CA)), nil
}

// placeCA replaces the CA file whole: whatever was at its name before (a
// link, say) is replaced, never written through.
func placeCA(dir string, pem []byte) error {
	return replacefile.Write(filepath.Join(dir, CA), 0o644, pem)
}

// New starts the gateway cfg describes, keeping its decisions; for
// in-process clients (the Starlark and WASM tiers) cfg has no listeners.
// cfg.Log, if set, still receives every decision.
func New(ctx context.Context, cfg egress.Config) (*Gateway, error) {
	g := &Gateway{sink: cfg.Log, job: cfg.Job}
	cfg.Log = func(r egress.Record) {
		g.mu.Lock()
		line := value.Clip(Line(r), maxDecisionLine)
		switch {
		case len(g.log) < MaxDecisions/2:
			g.log = append(g.log, line)
		case len(g.tail) < MaxDecisions/2:
			g.tail = append(g.tail, line)
		default:
			g.tail[g.next] = line
			g.next = (g.next + 1) % len(g.tail)
			g.dropped++
		}
		send := g.sink != nil
		if send && r.Verdict == egress.Deny {
			if g.refused >= MaxLoggedRefusals {
				g.quiet++
				send = false
			} else {
				g.refused++
			}
		}
		g.mu.Unlock()
		if send {
			g.sink(r)
		}
	}
	gw, err := egress.Start(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("starting egress gateway: %w", err)
	}
	g.gw = gw
	return g, nil
}

// Client returns the gateway's in-process client (every redirect hop
// checked).
func (g *Gateway) Client() *http.Client { return g.gw.Client() }

// Close stops the gateway (and removes its socket) and returns its
// decisions, in order: all of them, or the first and the last
// MaxDecisions/2 with a line between counting those not kept. It may be
// called more than once.
func (g *Gateway) Close() []string {
	g.gw.Close()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.quiet > 0 && !g.closed {
		g.sink(egress.Record{Time: time.Now().UTC(), Job: g.job, Via: "gateway", Verdict: egress.Deny,
			Reason: fmt.Sprintf("%d more refusals of this job not logged (the first %d were)", g.quiet, MaxLoggedRefusals)})
	}
	g.closed = true
	out := slices.Clone(g.log)
	if g.dropped > 0 {
		out = append(out, fmt.Sprintf("egress: %d more decisions not kept here (the first and last %d are)", g.dropped, MaxDecisions/2))
	}
	out = append(out, g.tail[g.next:]...)
	return append(out, g.tail[:g.next]...)
}

// Line renders a decision for Result.Decision:
// "egress VERDICT VIA METHOD HOST[:PORT]PATH: REASON".
func Line(r egress.Record) string {
	host := r.Host
	if r.Port != 0 {
		host += ":" + strconv.Itoa(r.Port)
	}
	s := fmt.Sprintf("egress %s %s %s %s%s", r.Verdict, r.Via, r.Method, host, r.Path)
	if r.Reason != "" {
		s += ": " + r.Reason
	}
	return s
}

// StartForwarder runs the forwarder inside the sandbox, towards the
// socket in sandboxDir, until the process ends or Close is called.
func StartForwarder(sandboxDir string) (*egressfwd.Forwarder, error) {
	return egressfwd.StartForwarder(context.Background(), path.Join(sandboxDir, Socket), egressfwd.ForwarderConfig{})
}
