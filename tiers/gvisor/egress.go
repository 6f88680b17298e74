package gvisor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/egress"
)

// Egress wiring. A sandbox has no network interface but loopback
// (--network=none). For a job granted grants.net the tier starts an egress
// gateway (proxy and resolver, on the host) listening on a Unix socket in
// the sandbox's socket directory, which is bind-mounted at agentDir/sock
// and reachable from inside through --host-uds=open. The agent (PID 1 of
// the sandbox) runs the forwarder on 127.0.0.1:3128 (HTTP) and :53 (DNS)
// for the job's life. The forwarder holds no policy, so a pooled sandbox
// enforces the rules of the job that claims it: its gateway starts only at
// claim time.
const (
	egressSocket     = "egress.sock"
	egressCA         = "ca.pem"
	sandboxEgressDir = agentDir + "/sock"
)

// jobGateway is one job's gateway and the decisions it logged.
type jobGateway struct {
	gw  *egress.Gateway
	mu  sync.Mutex
	log []string
}

// startGateway starts the job's gateway in the sandbox's socket directory
// and places the CA certificate next to it; it returns the environment the
// program needs.
func (t *Tier) startGateway(ctx context.Context, sb *sandbox, job *airlock.Job) (*jobGateway, []string, error) {
	dir := filepath.Join(sb.dir, "sock")
	jg := &jobGateway{}
	gw, err := egress.Start(ctx, egress.Config{
		Job:    sb.id,
		Rules:  job.Grants.Net,
		Hosts:  t.cfg.egressHosts,
		Socket: filepath.Join(dir, egressSocket),
		Log: func(r egress.Record) {
			jg.mu.Lock()
			jg.log = append(jg.log, recordLine(r))
			jg.mu.Unlock()
			if t.cfg.egressLog != nil {
				t.cfg.egressLog(r)
			}
		},
	})
	if err != nil {
		return nil, nil, fmt.Errorf("starting egress gateway: %w", err)
	}
	jg.gw = gw
	if err := os.WriteFile(filepath.Join(dir, egressCA), gw.CACertPEM(), 0o644); err != nil {
		gw.Close()
		return nil, nil, fmt.Errorf("placing the egress CA: %w", err)
	}
	return jg, egress.SandboxEnv(sandboxEgressDir + "/" + egressCA), nil
}

// close stops the gateway and returns its decisions, in order.
func (jg *jobGateway) close() []string {
	jg.gw.Close()
	jg.mu.Lock()
	defer jg.mu.Unlock()
	return jg.log
}

// recordLine renders a decision for Result.Decision.
func recordLine(r egress.Record) string {
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

// startForwarder runs in the agent for one job.
func startForwarder() (*egress.Forwarder, error) {
	return egress.StartForwarder(context.Background(), sandboxEgressDir+"/"+egressSocket, egress.ForwarderConfig{})
}
