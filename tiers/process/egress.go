package process

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/egresswire"
	"github.com/airlock-sandbox/airlock/tiers/process/internal/stage"
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
const sandboxEgressDir = stage.SandboxEgressDir

// egressDirFor is the host directory bound into sandbox name.
func (t *Tier) egressDirFor(name string) string {
	return filepath.Join(t.cfg.baseDir, name+".egress")
}

// makeEgressDir creates the (empty) host directory a sandbox's gateway
// will listen in: owned by the sandbox's uid and searchable by it alone
// (0500), bound read-only, so the sandbox can connect to the socket and
// read the CA but change nothing. Searchable by nobody else: the socket
// answers whoever can connect, and a level-2 program (on the host's file
// system, where Landlock does not govern connecting by path) would
// otherwise use another job's gateway, with that job's net grant.
func makeEgressDir(dir string, uid uint32) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o711); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o500); err != nil {
		return fmt.Errorf("egress directory: %w", err)
	}
	if err := os.Chown(dir, int(uid), int(uid)); err != nil {
		return fmt.Errorf("egress directory: %w", err)
	}
	return os.Chmod(dir, 0o500) // whatever the umask
}

// startGateway starts the job's gateway in the sandbox's egress directory.
func (t *Tier) startGateway(ctx context.Context, sb *sandbox, job *airlock.Job) (*egresswire.Gateway, []string, error) {
	return egresswire.Start(ctx, egresswire.ForRun(t.cfg.egress, sb.name, job.Grants.Net),
		sb.egressDir, sandboxEgressDir)
}

// forwarderMain is the egress forwarder's role, started by a sandbox's
// PID 1 (see stage.startForwarder): it listens on loopback in the
// sandbox's network namespace, reports on its ready descriptor, and
// carries connections to the gateway's socket until the sandbox ends.
func forwarderMain() int {
	ready := os.NewFile(stage.FdForwarderReady, "ready")
	f, err := egresswire.StartForwarder(sandboxEgressDir)
	if err != nil {
		fmt.Fprintf(ready, "%v", err)
		return 1
	}
	fmt.Fprint(ready, "ok")
	ready.Close()
	defer f.Close()
	select {} // until the PID namespace ends
}
