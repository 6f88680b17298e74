package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/internal/jobs"
)

func init() {
	register(&command{
		name:    "proxy",
		summary: "run the egress proxy and DNS resolver alone, under a policy file",
		usage:   "proxy --policy FILE [--listen ADDR] [--dns ADDR] [--hosts FILE] [--socket PATH] [--ca-out FILE] [--log FILE] [--job NAME]",
		run:     runProxy,
	})
}

func runProxy(ctx context.Context, e *env) int {
	c := commands["proxy"]
	fs := e.flags(c)
	policy := fs.String("policy", "", "policy `FILE`: a JSON or YAML list of rules {host, methods, ports}, as in grants.net")
	listen := fs.String("listen", "127.0.0.1:3128", "TCP `ADDR` of the HTTP proxy (\"\" for none)")
	dnsAddr := fs.String("dns", "", "`ADDR` of the DNS resolver, UDP and TCP (\"\" for none)")
	hostsFile := fs.String("hosts", "", "pins `FILE`: /etc/hosts-like lines (address name...); the only way a name reaches a private address")
	socket := fs.String("socket", "", "also listen on the Unix socket `PATH` (for sandbox forwarders)")
	caOut := fs.String("ca-out", "", "write the proxy's CA certificate (PEM) to `FILE`, for clients to trust")
	logFile := fs.String("log", "", "append decisions as JSON lines to `FILE` (default: stderr)")
	job := fs.String("job", "proxy", "job `NAME` recorded in each decision")
	if code, ok := e.parseFlagsOnly(fs); !ok {
		return code
	}
	if *policy == "" {
		fmt.Fprintln(e.stderr, "airlock proxy: --policy is required")
		return exitUsage
	}
	data, err := os.ReadFile(*policy)
	if err != nil {
		return e.fail(jobs.Invalid("--policy", "%v", err)) // a file that cannot be read is bad input
	}
	rules, err := egress.ParseRules(data)
	if err != nil {
		fmt.Fprintf(e.stderr, "airlock proxy: %s: %v\n", *policy, err)
		return exitUsage
	}
	cfg := egress.Config{Job: *job, Rules: rules, Listen: *listen, DNS: *dnsAddr, Socket: *socket}
	if *hostsFile != "" {
		f, err := os.Open(*hostsFile)
		if err != nil {
			return e.fail(jobs.Invalid("--hosts", "%v", err))
		}
		cfg.Hosts, err = egress.ParseHosts(f)
		f.Close()
		if err != nil {
			fmt.Fprintf(e.stderr, "airlock proxy: %s: %v\n", *hostsFile, err)
			return exitUsage
		}
	}
	sink := egress.JSONSink(e.stderr)
	if *logFile != "" {
		f, err := os.OpenFile(*logFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		if err != nil {
			return e.fail(err)
		}
		defer f.Close()
		sink = egress.JSONSink(f)
	}
	refusals := &refusalBudget{sink: sink, job: *job, max: proxyRefusalsPerMinute, now: time.Now}
	defer refusals.flush()
	cfg.Log = refusals.log
	gw, err := egress.Start(ctx, cfg)
	if err != nil {
		return e.fail(err)
	}
	defer gw.Close()
	if *caOut != "" {
		if err := os.WriteFile(*caOut, gw.CACertPEM(), 0o644); err != nil {
			return e.fail(err)
		}
	}
	if a := gw.ProxyAddr(); a != nil {
		fmt.Fprintf(e.stderr, "airlock proxy: HTTP proxy on %s\n", a)
	}
	if a := gw.DNSAddr(); a != nil {
		fmt.Fprintf(e.stderr, "airlock proxy: DNS on %s (udp and tcp)\n", a)
	}
	if s := gw.SocketPath(); s != "" {
		fmt.Fprintf(e.stderr, "airlock proxy: socket %s\n", s)
	}
	<-ctx.Done()
	return exitOK
}

// proxyRefusalsPerMinute bounds the refusals the proxy logs in a minute:
// a client refused in a loop would otherwise write records as fast as it
// can make requests. Allowed requests are all logged.
var proxyRefusalsPerMinute = 1000

// refusalBudget passes records to sink, at most max refusals a minute;
// those past it are counted, and one record says how many were not
// logged, with the first record of a later minute or when the proxy stops.
type refusalBudget struct {
	mu       sync.Mutex
	sink     func(egress.Record)
	job      string
	max      int
	now      func() time.Time
	start    time.Time // of the current minute
	n, quiet int
}

func (b *refusalBudget) log(r egress.Record) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if now := b.now(); now.Sub(b.start) >= time.Minute {
		b.summarise()
		b.start, b.n = now, 0
	}
	if r.Verdict == egress.Deny {
		if b.n >= b.max {
			b.quiet++
			return
		}
		b.n++
	}
	b.sink(r)
}

// flush logs the count of refusals not logged, if any.
func (b *refusalBudget) flush() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.summarise()
}

func (b *refusalBudget) summarise() {
	if b.quiet == 0 {
		return
	}
	b.sink(egress.Record{Time: b.now().UTC(), Job: b.job, Via: "proxy", Verdict: egress.Deny,
		Reason: fmt.Sprintf("%d more refusals not logged (at most %d a minute are)", b.quiet, b.max)})
	b.quiet = 0
}
