package process

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/tiers/internal/admit"
	"github.com/airlock-sandbox/airlock/tiers/process/internal/stage"
	"github.com/airlock-sandbox/airlock/tiers/process/internal/sysfilter"
)

// filterLevel is level 2: the stage shares the host's namespaces, joins
// the job's cgroup, drops to the job's uid and confines the program with
// Landlock, seccomp and rlimits before it executes it. It gets everything
// in its job spec; it has no base spec.
type filterLevel struct{}

// filterPolicy is level 2's seccomp policy. Without Landlock's scoping
// of abstract Unix sockets (ABI 6, Linux 6.12) a program sharing the
// host's network namespace could connect to any abstract socket there, so
// on older kernels it gets no AF_UNIX sockets at all. inotify is refused:
// a watch on a host directory the job may search but not open (/tmp)
// would show what other users do there.
var filterPolicy = sync.OnceValue(func() sysfilter.FilterOptions {
	return sysfilter.FilterOptions{NoUnix: stage.LandlockABI() < 6, NoInotify: true}
})

func (filterLevel) ownFS() bool         { return false }
func (filterLevel) ownNet() bool        { return false }
func (filterLevel) warm() bool          { return false }
func (filterLevel) cost() time.Duration { return 3 * time.Millisecond }
func (filterLevel) jobWithBase() bool   { return false }

func (filterLevel) beforeStart(*Tier, *stageBinary) {}

// cgroupFirst: a filter stage always goes straight on to its job.
func (filterLevel) cgroupFirst(*startOptions) bool { return true }

// build gives the stage a scratch on the host, always, and passes the
// read grants (the stage confines the program to them by path: see
// completeJob).
func (filterLevel) build(t *Tier, sb *sandbox, o *startOptions, _ *stageBinary, fds *fdTable, base *stage.BaseSpec) error {
	if err := t.hostScratch(sb, o, true); err != nil {
		return err
	}
	return addGrants(o, fds, base)
}

// command: the stage's environment holds only its marker and runtime
// settings, as a container's; it starts in the scratch directory, in a
// process group of its own. The stage drops to the job's uid itself (see
// filterStage): switching here would make it non-dumpable before it could
// execute itself through /proc/self/fd.
//
// It gets a mount namespace of its own (a copy of the host's), only so
// that it can mount a /proc that shows the program its own processes
// alone (see stage.hideProcesses): the PID namespace stays the host's.
func (filterLevel) command(sb *sandbox, cmd *exec.Cmd) {
	cmd.Env = []string{stage.Env + "=" + stage.Filter, "GOMAXPROCS=1", "GOGC=off"}
	cmd.Dir = sb.scratch
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWNS
}

// launch starts the stage from this process (no user namespace: Go starts
// it with vfork).
func (filterLevel) launch(_ *Tier, sb *sandbox, _ *stageBinary, cmd *exec.Cmd, _ *stage.BaseSpec, _ *os.File) error {
	return sb.startHere(cmd)
}

// handOver only puts the stage into its cgroup: it reads its job next.
func (filterLevel) handOver(_ context.Context, _ *sandbox, _ *startOptions, _ *stage.BaseSpec, enter func() error) error {
	return enter()
}

// completeJob adds what a container's base spec would carry: the scratch,
// the uid, the cgroup to join, the read grants and the seccomp program.
func (filterLevel) completeJob(sb *sandbox, job *airlock.Job, spec *stage.JobSpec) (err error) {
	spec.Scratch = sb.scratch
	// No /scratch or /tmp of its own here: the baseline's HOME and TMPDIR
	// are the scratch directory, unless the job sets them.
	vars := admit.Vars(job)
	for i, kv := range spec.Env {
		name, _, _ := strings.Cut(kv, "=")
		if _, set := vars[name]; !set && (name == "HOME" || name == "TMPDIR") {
			spec.Env[i] = name + "=" + sb.scratch
		}
	}
	spec.UID = sb.uid
	spec.CgroupFds = sb.joinFds
	spec.ReadPaths = job.Grants.FS.Read
	// Without spawn the program may not make an anonymous file either,
	// since Landlock does not govern executing one (as in a container).
	policy := filterPolicy()
	policy.NoMemfd = spec.NoExec
	spec.Seccomp, err = sysfilter.Program(policy)
	return err
}

// jobStarted: the spec pipe stays open; the stage reads its end as its
// stop (see stopProgram).
func (filterLevel) jobStarted(*sandbox) {}

// stopProgram closes the spec pipe, the stage's stop: it kills and reaps
// the program's processes, which are its children — killed first, they
// would be re-parented to the host's init as zombies. The stage goes
// after a moment for that.
func (filterLevel) stopProgram(sb *sandbox) {
	if sb.cg == nil {
		return
	}
	sb.spec.Close()
	_ = sb.cg.kill(sb.pid)
	select {
	case <-sb.waitCh:
	case <-time.After(2 * time.Second):
	}
}

func (filterLevel) placedDir(sb *sandbox) string  { return sb.scratch }
func (filterLevel) freshScratch(sb *sandbox) bool { return sb.ownsScr }
