// Package gvisor is airlock's gVisor tier (level 4, intercepted
// virtualisation): each command job runs in its own runsc sandbox, whose
// processes talk to gVisor's user-space kernel (the Sentry) instead of the
// host's.
//
// A job's sandbox is built from an OCI bundle generated here: a read-only
// root holding the host's program directories, a writable scratch as the
// working directory (gVisor's memory-backed overlay, so writes never reach
// the host), an environment holding only the baseline every tier gives
// (PATH, HOME, TMPDIR, LANG) and the job's variables, no network interface but loopback (--network=none), the
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
// The pool is per image: WithPool sizes the default image's, WithImagePool
// another image's, and a sandbox only ever serves a job of its own image.
//
// A read grant is a read-only bind mount at its host path, or at the guest
// path grants.fs.at gives it (not over /, the scratch, /tmp or the agent's
// directory: such a job is not admitted). A copy grant (grants.fs.copy) is
// a writable bind under the same memory-backed overlay as the scratch:
// the host tree is only read, changes stay in sandbox memory and vanish
// with it. Before the program starts, the agent gives the job's user
// what of the copy it could already read (which copies those files into
// the overlay); what it could not read stays closed. With a scratch cap
// each copy's overlay holds at most scratch_mb: a write beyond it fails
// with no space left, and a copy whose readable files do not fit fails
// the job as invalid (grants.fs.copy). A grant at /etc replaces the
// tier's files there. Jobs with read grants never use the warm pool.
//
// Sessions (OpenSession) keep one agent sandbox across runs, so files in the
// scratch persist until the session is closed or idles past its TTL.
//
// Attach runs a command job attached (airlock.Attacher) in a single-job
// agent sandbox, pooled or created for it: its stdin and stdout are the
// sandbox's two streams, connections the agent opened to the host's
// socket right after its own, which the program reads and writes itself;
// its stderr comes back as for Run (see attach.go).
//
// With an image store (Config.WithImages), a job's Image names its
// environment: the store's unpacked image becomes the sandbox's root,
// read-only, in place of the host's program directories; writes go to the
// scratch and /tmp as above. The image's /etc is its own except passwd,
// group, hosts, hostname and resolv.conf, which are the tier's unless a
// read grant is placed over them. The job's
// environment is the image's, then PATH
// (/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin), HOME
// (/scratch), TMPDIR (/tmp) and LANG (C.UTF-8) where the image sets none,
// then the job's secrets; nothing comes from the host. The image's user is
// ignored (jobs run as the sandbox's unprivileged uid), and so are its
// working directory (the job starts in the scratch, where its files are)
// and its entrypoint (the job's argv runs). Result.Image is the image's
// digest ("host" for the host view, which a store may offer). A sandbox
// holds its image until it is destroyed. The warm pool is keyed by image
// digest and keeps only the default image ready; a session runs the
// default image for its life and refuses jobs naming another. Without a
// store, jobs naming an image other than the host view are not admitted.
package gvisor
