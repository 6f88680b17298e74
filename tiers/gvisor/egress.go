package gvisor

import (
	"context"
	"path/filepath"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/egresswire"
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
const sandboxEgressDir = agentDir + "/sock"

// startGateway starts the job's gateway in the sandbox's socket directory.
func (t *Tier) startGateway(ctx context.Context, sb *sandbox, job *airlock.Job) (*egresswire.Gateway, []string, error) {
	return egresswire.Start(ctx, egresswire.ForRun(t.cfg.egress, sb.id, job.Grants.Net),
		filepath.Join(sb.dir, "sock"), sandboxEgressDir)
}
