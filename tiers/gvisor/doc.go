// Package gvisor is airlock's gVisor tier (level 4, intercepted
// virtualisation): each command job runs in its own runsc sandbox, whose
// processes talk to gVisor's user-space kernel (the Sentry) instead of the
// host's.
//
// A job's sandbox is built from an OCI bundle generated here: a read-only
// root holding the host's program directories, a writable scratch as the
// working directory (gVisor's memory-backed overlay, so writes never reach
// the host), an environment holding only a fixed PATH and HOME plus the
// job's secrets, no network interface but loopback (--network=none), the
// systrap platform, and a cgroup created by the tier before the sandbox
// starts, which carries the job's memory, CPU and process limits and tells
// an out-of-memory kill apart from any other. The wall clock, the CPU-time
// limit, the output cap and cancellation are enforced from the host, which
// destroys the sandbox when one of them runs out.
//
// A warm pool (Config.WithPool) keeps sandboxes created in advance whose
// PID 1 is an airlock agent: the running executable re-executed in agent
// mode (see agent.go). A claimed sandbox receives the job over a Unix socket
// (gVisor's --host-uds), runs it once, streams the output back and is
// destroyed; a used sandbox never returns to the pool. The job's limits and
// secrets are bound when it is claimed, not when the sandbox was created.
//
// Sessions (OpenSession) keep one agent sandbox across runs, so files in the
// scratch persist until the session is closed or idles past its TTL.
package gvisor
