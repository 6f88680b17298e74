package stage

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
)

// SandboxEgressDir is where a sandbox sees the host directory in which its
// job's egress gateway listens (bound read-only).
const SandboxEgressDir = "/run/egress"

// FdForwarderReady is the descriptor on which a forwarder process reports
// that it listens ("ok") or why it could not (any other text).
const FdForwarderReady = 3

// forwarder is the egress forwarder process PID 1 started.
type forwarder struct {
	pid   int
	ready *os.File // read end of its ready pipe until it reported
}

// startForwarder runs in the sandbox's PID 1 while it still holds its
// capabilities in the sandbox's namespaces (binding port 53 and setting lo
// up need them): it starts the egress forwarder (127.0.0.1:3128 and :53
// carried to the gateway's socket) as a child process — this binary again,
// dispatched by the process package, which links the egress code this
// package must not import (see the package doc). It does not wait for it
// to listen: see wait. The forwarder lives as long as PID 1, that is as
// long as the job: when PID 1 exits the kernel kills it with the PID
// namespace.
func startForwarder(exeFd int) (*forwarder, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("egress forwarder: %w", err)
	}
	null := devNullFd()
	pid, err := syscall.ForkExec(FdPath(exeFd), []string{"airlock-forwarder"}, &syscall.ProcAttr{
		Env:   []string{Env + "=" + Forwarder, "GOMAXPROCS=1"},
		Files: []uintptr{null, null, null, w.Fd()},
	})
	w.Close()
	if null > 2 {
		syscall.Close(int(null))
	}
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("egress forwarder: starting: %w", err)
	}
	return &forwarder{pid: pid, ready: r}, nil
}

// wait blocks until the forwarder listens (or has failed to).
func (f *forwarder) wait() error {
	if f.ready == nil {
		return nil
	}
	msg, err := io.ReadAll(io.LimitReader(f.ready, 4096))
	f.ready.Close()
	f.ready = nil
	switch {
	case err != nil:
		err = fmt.Errorf("egress forwarder: %w", err)
	case strings.TrimSpace(string(msg)) != "ok" && len(msg) == 0:
		err = errors.New("egress forwarder: exited before it listened")
	case strings.TrimSpace(string(msg)) != "ok":
		err = fmt.Errorf("egress forwarder: %s", msg)
	}
	if err != nil {
		_ = f.stop()
	}
	return err
}

// stop kills the forwarder and reaps it: once it is reaped its listening
// sockets are closed.
func (f *forwarder) stop() error {
	if f.ready != nil {
		f.ready.Close()
		f.ready = nil
	}
	_ = syscall.Kill(f.pid, syscall.SIGKILL)
	for {
		_, err := syscall.Wait4(f.pid, nil, 0, nil)
		if !errors.Is(err, syscall.EINTR) {
			if err != nil && !errors.Is(err, syscall.ECHILD) {
				return fmt.Errorf("egress forwarder: stopping: %w", err)
			}
			return nil
		}
	}
}
