package process

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

// Egress wiring. A level-3 sandbox has a network namespace with only
// loopback. For a job granted grants.net, the tier starts an egress
// gateway (proxy and resolver, outside the sandbox) on a Unix socket in a
// per-sandbox host directory, which is bound read-only into the sandbox at
// sandboxEgressDir; PID 1 of the sandbox runs the forwarder (127.0.0.1:3128
// for HTTP, 127.0.0.1:53 for DNS) before it drops its capabilities and
// starts the program. The forwarder holds no policy: the claiming job's
// gateway decides, so a pooled sandbox (created with the empty directory
// bound) enforces the rules of the job that claims it.
const (
	sandboxEgressDir = "/run/egress"
	egressSocket     = "egress.sock"
	egressCA         = "ca.pem"
)

// egressDirFor is the host directory bound into sandbox name.
func (t *Tier) egressDirFor(name string) string {
	return filepath.Join(t.cfg.baseDir, name+".egress")
}

// makeEgressDir creates the (empty) host directory a sandbox's gateway
// will listen in: owned by root, searchable by the sandbox's uid, bound
// read-only, so the sandbox can connect to the socket and read the CA but
// change nothing.
func makeEgressDir(dir string) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o711); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("egress directory: %w", err)
	}
	return os.Chmod(dir, 0o755) // whatever the umask
}

// jobGateway is one job's gateway and the decisions it logged.
type jobGateway struct {
	gw  *egress.Gateway
	mu  sync.Mutex
	log []string
}

// startGateway starts the job's gateway on the sandbox's socket and places
// the CA certificate next to it. It returns the environment the program
// needs (proxy and trust variables).
func (t *Tier) startGateway(ctx context.Context, sb *sandbox, job *airlock.Job) (*jobGateway, []string, error) {
	jg := &jobGateway{}
	gw, err := egress.Start(ctx, egress.Config{
		Job:    sb.name,
		Rules:  job.Grants.Net,
		Hosts:  t.cfg.egressHosts,
		Socket: filepath.Join(sb.egressDir, egressSocket),
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
	if err := os.WriteFile(filepath.Join(sb.egressDir, egressCA), gw.CACertPEM(), 0o644); err != nil {
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

// startForwarder runs in the sandbox's PID 1 (while it still holds its
// capabilities in the sandbox's namespaces): it sets loopback up and
// carries connections to 127.0.0.1:3128 and :53 to the gateway's socket.
// It lives as long as PID 1, that is as long as the job.
func startForwarder() error {
	if err := egress.LoopbackUp(); err != nil {
		return fmt.Errorf("egress forwarder: loopback: %w", err)
	}
	_, err := egress.StartForwarder(context.Background(), sandboxEgressDir+"/"+egressSocket, egress.ForwarderConfig{})
	return err
}
