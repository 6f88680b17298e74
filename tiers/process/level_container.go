package process

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/tiers/process/internal/stage"
	"github.com/airlock-sandbox/airlock/tiers/process/internal/sysfilter"
	"golang.org/x/sys/unix"
)

// containerLevel is level 3: the stage is PID 1 of new user, PID, mount,
// network, IPC, UTS and time namespaces; it builds the sandbox's root from
// its base spec, then runs the job under the seccomp filter.
type containerLevel struct{}

// cloneNewTime is CLONE_NEWTIME where the kernel has time namespaces
// (5.6 and later), else 0. A container's stage is born in its own time
// namespace (Go clones with clone3 for it) rather than unsharing one
// later: before 6.3 the kernel refuses, with EINVAL, a vfork-style child
// of a process whose children go to another time namespace than its own,
// and that is how the stage starts the program.
var cloneNewTime = sync.OnceValue(func() uintptr {
	if _, err := os.Stat("/proc/self/ns/time"); err == nil {
		return unix.CLONE_NEWTIME
	}
	return 0
})

func (containerLevel) ownFS() bool         { return true }
func (containerLevel) ownNet() bool        { return true }
func (containerLevel) warm() bool          { return true }
func (containerLevel) cost() time.Duration { return 12 * time.Millisecond }
func (containerLevel) jobWithBase() bool   { return true }

// beforeStart starts the tier's spawner ahead: see startAhead.
func (containerLevel) beforeStart(t *Tier, bin *stageBinary) { t.spawn.startAhead(bin) }

// cgroupFirst: only a container whose job follows its base spec goes
// straight on to the job.
func (containerLevel) cgroupFirst(o *startOptions) bool { return o.job != nil }

func (containerLevel) build(t *Tier, sb *sandbox, o *startOptions, bin *stageBinary, fds *fdTable, base *stage.BaseSpec) (err error) {
	// The container has a loopback-only network of its own, so it may
	// have inet sockets.
	if base.Seccomp, err = sysfilter.Program(sysfilter.FilterOptions{Inet: true}); err != nil {
		return fmt.Errorf("starting sandbox: %w", err)
	}
	// Without spawn the job may not make an anonymous file either, since
	// Landlock does not govern executing one. (The kernel's
	// vm.memfd_noexec would forbid that per PID namespace, but its file
	// belongs to the host's root, which the stage's uid is not.)
	if base.SeccompNoExec, err = sysfilter.Program(sysfilter.FilterOptions{Inet: true, NoMemfd: true}); err != nil {
		return fmt.Errorf("starting sandbox: %w", err)
	}
	if err := t.hostScratch(sb, o, o.hostScratch); err != nil {
		return err
	}
	if sb.scratch != "" {
		f, err := cloneTree(sb.scratch, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
		if err != nil {
			return fmt.Errorf("starting sandbox: scratch: %w", err)
		}
		fds.set(stage.FdScratch, fds.give(f))
		base.HasScratch = true
	}
	if err := t.addRoot(sb, o, fds, base); err != nil {
		return err
	}
	if err := addGrants(o, fds, base); err != nil {
		return err
	}
	if o.egress {
		return t.addEgress(sb, bin, fds, base)
	}
	return nil
}

// addRoot passes the image's root, or else the tier's /etc template.
func (t *Tier) addRoot(sb *sandbox, o *startOptions, fds *fdTable, base *stage.BaseSpec) error {
	if sb.img != nil {
		// The image's root, read-only; no descriptor of the path itself,
		// for the reasons cloneTree gives.
		f, err := cloneTree(sb.img.Root, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
		if err != nil {
			return fmt.Errorf("starting sandbox: image root: %w", err)
		}
		base.RootFd = fds.add(fds.give(f))
	} else if !grantsUnderEtc(guestPaths(o.read, o.at)) {
		// Without a template (it could not be built) the stage builds
		// /etc itself.
		if f, err := t.etc.clone(t.cfg.baseDir); err == nil {
			base.EtcFd = fds.add(fds.give(f))
		}
	}
	return nil
}

// addEgress binds the sandbox's egress directory, where its gateway will
// listen, and passes the forwarder's binary when the stage is not it.
func (t *Tier) addEgress(sb *sandbox, bin *stageBinary, fds *fdTable, base *stage.BaseSpec) error {
	dir := t.egressDirFor(sb.name)
	if err := makeEgressDir(dir, sb.uid); err != nil {
		return fmt.Errorf("starting sandbox: %w", err)
	}
	sb.egressDir = dir
	f, err := cloneTree(dir, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
	if err != nil {
		return fmt.Errorf("starting sandbox: egress directory: %w", err)
	}
	base.Binds = append(base.Binds, stage.BindSpec{Target: sandboxEgressDir, Fd: fds.add(fds.give(f)), Dir: true})
	base.Egress = true
	if bin.separate() {
		// The forwarder is this binary (the small stage binary has no
		// egress code); the stage executes it through this descriptor.
		self, err := selfExe()
		if err != nil {
			return fmt.Errorf("starting sandbox: %w", err)
		}
		base.ForwarderFd = fds.add(self)
	}
	return nil
}

// command: the stage's environment holds only its marker and runtime
// settings (one P, no GC: it allocates little and lives briefly); the
// program gets an environment of its own (the job's secrets only).
func (containerLevel) command(sb *sandbox, cmd *exec.Cmd) {
	cmd.Env = []string{stage.Env + "=" + stage.Container, "GOMAXPROCS=1", "GOGC=off"}
	cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID | syscall.CLONE_NEWNS |
		syscall.CLONE_NEWNET | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS | cloneNewTime()
	cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(sb.uid), Size: 1}}
	cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(sb.uid), Size: 1}}
	// Become the mapped root, so the stage holds capabilities in its
	// own user namespace (and none outside it).
	cmd.SysProcAttr.Credential = &syscall.Credential{Uid: 0, Gid: 0, NoSetGroups: true}
}

// launch starts the stage through the tier's spawner (see spawner.go).
// Without egress nothing configures the sandbox's network, so a namespace
// made ahead will do (see stage.netSpares).
func (containerLevel) launch(t *Tier, sb *sandbox, bin *stageBinary, cmd *exec.Cmd, base *stage.BaseSpec, cgDir *os.File) error {
	return sb.startProc(&t.spawn, bin, cmd, sb.uid, !base.Egress, cgDir)
}

// handOver: the container builds its root while the parent moves it into
// the job's cgroup: the move is done before the job spec goes out, and so
// before the stage makes its cgroup namespace or anything of the job
// runs. A stage that starts the egress forwarder at once is moved first,
// so that the forwarder is born inside the cgroup.
func (containerLevel) handOver(ctx context.Context, sb *sandbox, o *startOptions, base *stage.BaseSpec, enter func() error) error {
	if !base.Egress {
		if err := sb.sendBase(base); err != nil {
			return err
		}
	}
	if err := enter(); err != nil {
		return err
	}
	if base.Egress {
		if err := sb.sendBase(base); err != nil {
			return err
		}
	}
	if o.job != nil {
		// Now that the stage is in its cgroup: it reads the job once its
		// root is built and it has reported ready. Only a job that fits
		// in the pipe with the base spec goes now, so that the write
		// cannot block on a stage that is still building.
		if b, err := stage.AppendJob(nil, o.job); err == nil && len(b) <= preSendMax {
			if _, err := sb.spec.Write(b); err != nil {
				return fmt.Errorf("starting sandbox: sending job: %w", err)
			}
			sb.jobSent = true
		}
	}
	// A stage whose job is on its way is not waited for: its ready report
	// is read with the job's statuses (see runJob).
	if !sb.jobSent {
		return sb.awaitReady(ctx)
	}
	return nil
}

// completeJob: the container's job spec is complete (containerJobSpec).
func (containerLevel) completeJob(*sandbox, *airlock.Job, *stage.JobSpec) error { return nil }

// jobStarted closes the spec pipe: the stage needs nothing more.
func (containerLevel) jobStarted(sb *sandbox) { sb.spec.Close() }

// stopProgram: nothing before the stage is killed, whose death takes its
// PID namespace and every process in it.
func (containerLevel) stopProgram(*sandbox) {}

// placedDir is the host scratch directory, or the container's own tmpfs
// through its PID 1.
func (containerLevel) placedDir(sb *sandbox) string {
	if sb.scratch == "" {
		return fmt.Sprintf("/proc/%d/root/scratch", sb.pid)
	}
	return sb.scratch
}

func (containerLevel) freshScratch(sb *sandbox) bool { return sb.scratch == "" || sb.ownsScr }
