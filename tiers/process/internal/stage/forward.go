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

// startForwarder runs in the sandbox's PID 1 while it still holds its
// capabilities in the sandbox's namespaces (binding port 53 and setting lo
// up need them): it starts the egress forwarder (127.0.0.1:3128 and :53
// carried to the gateway's socket) as a child process — this binary again,
// dispatched by the process package, which links the egress code this
// package must not import (see the package doc) — and waits until it
// listens. The forwarder lives as long as PID 1, that is as long as the
// job: when PID 1 exits the kernel kills it with the PID namespace.
func startForwarder() (pid int, err error) {
	r, w, err := os.Pipe()
	if err != nil {
		return 0, fmt.Errorf("egress forwarder: %w", err)
	}
	defer r.Close()
	null := devNullFd()
	pid, err = syscall.ForkExec(FdPath(FdExe), []string{"airlock-forwarder"}, &syscall.ProcAttr{
		Env:   []string{Env + "=" + Forwarder, "GOMAXPROCS=1"},
		Files: []uintptr{null, null, null, w.Fd()},
	})
	w.Close()
	if null > 2 {
		syscall.Close(int(null))
	}
	if err != nil {
		return 0, fmt.Errorf("egress forwarder: starting: %w", err)
	}
	msg, err := io.ReadAll(io.LimitReader(r, 4096))
	switch {
	case err != nil:
		err = fmt.Errorf("egress forwarder: %w", err)
	case strings.TrimSpace(string(msg)) != "ok" && len(msg) == 0:
		err = errors.New("egress forwarder: exited before it listened")
	case strings.TrimSpace(string(msg)) != "ok":
		err = fmt.Errorf("egress forwarder: %s", msg)
	}
	if err != nil {
		_ = stopForwarder(pid)
		return 0, err
	}
	return pid, nil
}

// stopForwarder kills the forwarder and reaps it: once it is reaped its
// listening sockets are closed.
func stopForwarder(pid int) error {
	_ = syscall.Kill(pid, syscall.SIGKILL)
	for {
		_, err := syscall.Wait4(pid, nil, 0, nil)
		if !errors.Is(err, syscall.EINTR) {
			if err != nil && !errors.Is(err, syscall.ECHILD) {
				return fmt.Errorf("egress forwarder: stopping: %w", err)
			}
			return nil
		}
	}
}
