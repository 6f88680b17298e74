package main

import (
	"context"
	"fmt"
	"os"

	"github.com/airlock-sandbox/airlock/egress"
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
	if _, _, code, ok := e.parse(fs); !ok {
		return code
	}
	if *policy == "" {
		fmt.Fprintln(e.stderr, "airlock proxy: --policy is required")
		return exitUsage
	}
	data, err := os.ReadFile(*policy)
	if err != nil {
		return e.fail(err)
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
			return e.fail(err)
		}
		cfg.Hosts, err = egress.ParseHosts(f)
		f.Close()
		if err != nil {
			fmt.Fprintf(e.stderr, "airlock proxy: %s: %v\n", *hostsFile, err)
			return exitUsage
		}
	}
	cfg.Log = egress.JSONSink(e.stderr)
	if *logFile != "" {
		f, err := os.OpenFile(*logFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		if err != nil {
			return e.fail(err)
		}
		defer f.Close()
		cfg.Log = egress.JSONSink(f)
	}
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
