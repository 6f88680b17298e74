package microvm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/internal/egressfwd"
	"github.com/airlock-sandbox/airlock/internal/egresswire"
	"github.com/airlock-sandbox/airlock/role"
	"github.com/airlock-sandbox/airlock/tiers/microvm/internal/wire"
)

// Egress wiring. A VM for a job without grants.net has no network device
// at all (-nic none). A job granted egress boots cold with one virtio-net
// device on a QEMU user network with restrict=on, whose only way out is a
// guestfwd: TCP connections to guestProxy are handed, one per connection,
// to a forwarder process (this binary, re-executed) that carries them to
// the job's egress gateway on a Unix socket in the VM's directory. The
// guest has an address on the user network's subnet and no default route;
// slirp answers nothing else there (restrict=on), DNS included. The
// forwarder holds no policy: the gateway outside the VM decides.
const (
	guestAddr   = "10.0.2.15/24"
	guestProxy  = "10.0.2.100:3128"
	guestCADir  = "/etc/airlock"
	netModules  = "failover,net_failover,virtio_net"
	forwardRole = "microvm-forward"
	forwardArg  = "airlock-microvm-egress-forward"
	qemuSandbox = "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny"
	// spawn=deny and elevateprivileges=deny stop QEMU from starting the
	// guestfwd's forwarder, so a VM with a network device runs with the
	// rest of the sandbox only.
	qemuSandboxNet = "on,obsolete=deny,resourcecontrol=deny"
)

// Roles are the roles this tier starts the running binary in: the
// guestfwd forwarder that QEMU starts for a net-granted VM (the role in
// its environment, the marker in its arguments), with the guest's
// connection on stdin/stdout and the gateway's socket as the argument. A
// program that uses the tier passes them to role.Run first thing in main.
func Roles() []role.Role {
	return []role.Role{{Name: forwardRole, Main: func() int {
		if len(os.Args) != 3 || os.Args[1] != forwardArg {
			fmt.Fprintln(os.Stderr, "airlock egress forwarder: started without its arguments")
			return 2
		}
		// QEMU's working directory is its VM's (see vmmDir).
		wd, err := os.Getwd()
		if err != nil {
			fmt.Fprintf(os.Stderr, "airlock egress forwarder: %v\n", err)
			return 1
		}
		release, ok := forwarderSlot(wd)
		if !ok {
			fmt.Fprintf(os.Stderr, "airlock egress forwarder: the VM has %d connections open, the most it may\n", maxForwarders)
			return 1
		}
		defer release()
		if err := egressfwd.ForwardStdio(os.Args[2], egressfwd.StreamHTTP, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintf(os.Stderr, "airlock egress forwarder: %v\n", err)
			return 1
		}
		return 0
	}}}
}

// maxForwarders bounds the guestfwd forwarders alive for one VM, as the
// gateway bounds its connections: QEMU starts one per guest connection,
// so a guest opening connections without end would otherwise hold as many
// host processes.
const maxForwarders = egress.DefaultMaxConns

// forwarderSlot takes one of a VM's forwarder slots, a lock file in the
// VM's directory held until release (or the process's end); ok is false
// when every slot is held.
func forwarderSlot(dir string) (release func(), ok bool) {
	for i := range maxForwarders {
		f, err := os.OpenFile(filepath.Join(dir, "forward-"+strconv.Itoa(i)+".lock"), os.O_CREATE|os.O_RDWR|syscall.O_CLOEXEC, 0o600)
		if err != nil {
			return nil, false
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			return func() { f.Close() }, true
		}
		f.Close()
	}
	return nil, false
}

// WithEgress sets the template of every net-granted job's egress gateway
// (pins, log sink, limits); each job brings its own rules and gets its own
// gateway, socket and CA.
func (c Config) WithEgress(cfg egress.Config) Config { c.egress = egresswire.Template(cfg); return c }

// guestfwd is the -netdev user option that carries the guest's proxy
// connections, through forwarder, to the gateway's socket in dir. QEMU's
// option parser needs commas doubled; glib's shell parser (libslirp
// splits the command with it) needs the paths quoted.
func guestfwd(forwarder, dir string) string {
	cmd := shellQuote(forwarder) + " " + forwardArg + " " + shellQuote(filepath.Join(dir, egresswire.Socket))
	return "user,id=n0,restrict=on,guestfwd=tcp:" + guestProxy + "-cmd:" + strings.ReplaceAll(cmd, ",", ",,")
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// startEgress starts the job's gateway on the socket the VM's guestfwd
// names, and returns the guest's network settings and the job's proxy and
// trust variables.
func (t *Tier) startEgress(ctx context.Context, v *vm, job *airlock.Job) (*egresswire.Gateway, *wire.Net, []string, error) {
	gw, env, err := egresswire.Start(ctx, egresswire.ForRun(t.cfg.egress, vmNamePrefix+v.id, job.Grants.Net), v.dir, guestCADir)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := v.user.own(filepath.Join(v.dir, egresswire.Socket)); err != nil {
		gw.Close()
		return nil, nil, nil, fmt.Errorf("handing the egress socket to the VM's user: %w", err)
	}
	ca, err := os.ReadFile(filepath.Join(v.dir, egresswire.CA))
	if err != nil {
		gw.Close()
		return nil, nil, nil, fmt.Errorf("reading the egress CA: %w", err)
	}
	for i, e := range env {
		env[i] = strings.ReplaceAll(e, egress.SandboxProxyAddr, guestProxy)
	}
	return gw, &wire.Net{Addr: guestAddr, CA: ca, CAPath: guestCADir + "/" + egresswire.CA}, env, nil
}

// withEnv returns a copy of secrets with the KEY=VALUE pairs of env set
// over them: the job's environment, with the proxy and trust variables.
func withEnv(secrets map[string]string, env []string) map[string]string {
	out := make(map[string]string, len(secrets)+len(env))
	for k, v := range secrets {
		out[k] = v
	}
	for _, e := range env {
		k, v, _ := strings.Cut(e, "=")
		out[k] = v
	}
	return out
}
