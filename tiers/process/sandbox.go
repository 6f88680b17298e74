package process

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/internal/hostpath"
	"github.com/airlock-sandbox/airlock/internal/jobs"
	"github.com/airlock-sandbox/airlock/tiers/process/internal/stage"
	"github.com/airlock-sandbox/airlock/tiers/process/internal/sysfilter"
	"golang.org/x/sys/unix"
)

// namePrefix marks everything a sandbox leaves on the host while it runs
// (cgroups, scratch mounts, /etc templates): <owner>-<random>, where the
// owner is this process's lease in the base directory (see sweep.go). The
// start-up sweep removes what an owner that is gone left behind.
const namePrefix = "airlock-process-"

// nameSeq numbers this process's sandbox names.
var nameSeq atomic.Uint64

// newName names what a sandbox of baseDir leaves on the host:
// <owner>-<n>, n counting in base 36, so that names are no longer than
// "airlock-process-<pid>-<12 hex>" for the first 46656 of a process (a
// scratch directory's name ends up in a socket path, which is short).
// Without a lease (the base directory cannot be written, which the start
// fails on anyway) the name carries only the pid, as earlier versions'
// names did, and a sweep judges it by that.
func newName(baseDir string) string {
	if o, err := processOwner(baseDir); err == nil {
		return o.Name() + "-" + strconv.FormatUint(nameSeq.Add(1), 36)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	return namePrefix + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(b[:])
}

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

// filterPolicy is level 2's seccomp policy. Without Landlock's scoping
// of abstract Unix sockets (ABI 6, Linux 6.12) a program sharing the
// host's network namespace could connect to any abstract socket there, so
// on older kernels it gets no AF_UNIX sockets at all.
var filterPolicy = sync.OnceValue(func() sysfilter.FilterOptions {
	return sysfilter.FilterOptions{NoUnix: stage.LandlockABI() < 6}
})

// pidsHeadroom is added to the job's process limit for the stage's own
// runtime threads (PID 1 of the sandbox is a Go program).
const pidsHeadroom = 16

var (
	exeOnce sync.Once
	exeFile *os.File
	exeErr  error
)

// selfExe is this binary, opened once; sandboxes execute it through
// /proc/self/fd so that the unprivileged sandbox uid needs no search
// permission on the directories above it.
func selfExe() (*os.File, error) {
	exeOnce.Do(func() {
		var p string
		if p, exeErr = os.Executable(); exeErr == nil {
			exeFile, exeErr = os.Open(p)
		}
	})
	return exeFile, exeErr
}

// sandbox is one started stage: a container waiting for its job (its base
// spec sent), or a filter stage waiting for its job.
type sandbox struct {
	name    string
	level   airlock.Level
	uid     uint32
	ownUID  bool
	proc    // the stage
	cg      jobCgroup
	spec    *os.File
	status  *bufio.Reader // statusR's stage.Status frames
	statusR *os.File
	stdin   *os.File
	stdout  *os.File
	stderr  *os.File
	scratch string // host scratch directory (filter tier), "" for a container's own tmpfs
	ownsScr bool   // unmount and remove scratch when done
	// egressDir is the host directory bound at /run/egress, where a
	// net-granted job's gateway listens ("" when not bound).
	egressDir string
	ready     time.Time
	limits    cgLimits // what its cgroup enforces now
	pooled    bool     // claimed from the tier's pool
	key       poolKey  // the pool key it was started for (pooled ones)
	// img is the image that is its root (nil: the host view);
	// releaseImage, when set, gives it back to the resolver once the
	// sandbox is gone.
	img          *image.Image
	releaseImage func()
	// jobSent: the job spec went with the base spec, and start did not
	// wait for the stage's ready report (runJob reads it).
	jobSent bool
	// joinFds: the stage's descriptors of the cgroup files it joins
	// through itself (nil: start moved it in).
	joinFds []int
}

// spawnMaxFiles bounds the descriptors a start through the spawner may
// pass (one message; SCM_MAX_FD is 253).
const spawnMaxFiles = 250

// preSendMax bounds a job spec sent with the base spec: with it, well
// within a pipe's 64 KiB buffer.
const preSendMax = 32 << 10

// startOptions say how to build a sandbox.
type startOptions struct {
	level     airlock.Level
	limits    airlock.Limits
	scratchMB int64
	read      []string // granted read-only paths
	// at places read grants at guest paths (grants.fs.at); copies are the
	// read grants given as writable copies (grants.fs.copy). Containers
	// only.
	at      map[string]string
	copies  []string
	uid     uint32 // 0: allocate one
	scratch string // an existing scratch directory (session, workspace); "" for a fresh one
	egress  bool   // bind an egress directory (containers only)
	// hostScratch gives a container a scratch on the host (as the filter
	// level has) instead of its own tmpfs, so that files can be collected
	// from it after the program has ended.
	hostScratch bool
	// job, for a cold container whose job needs no round trip first
	// (no net grant, no placed check), is sent right after the base spec.
	job *stage.JobSpec
	// img is the container's root (nil or the host: the host view);
	// releaseImage, when set, is the sandbox's to call once it is
	// destroyed (also when the start fails).
	img          *image.Image
	releaseImage func()
}

// pipes makes n pipes ([read, write] each), or none.
func pipes(n int) ([][2]*os.File, error) {
	out := make([][2]*os.File, 0, n)
	for range n {
		r, w, err := os.Pipe()
		if err != nil {
			for _, p := range out {
				p[0].Close()
				p[1].Close()
			}
			return nil, err
		}
		out = append(out, [2]*os.File{r, w})
	}
	return out, nil
}

func cgLimitsFor(l airlock.Limits) cgLimits {
	return cgLimits{memoryBytes: l.MemoryMB << 20, pids: l.Pids + pidsHeadroom}
}

// start launches a stage. For a container it sends the base spec and
// waits until the root is built.
func (t *Tier) start(ctx context.Context, o startOptions) (_ *sandbox, err error) {
	bin, err := t.stageBin()
	if err != nil {
		return nil, fmt.Errorf("starting sandbox: %w", err)
	}
	exe := bin.file
	if o.level == airlock.LevelContainer {
		t.spawn.startAhead(bin) // a tier's first container: see startAhead
	}
	sb := &sandbox{name: newName(t.cfg.baseDir), level: o.level, uid: o.uid, proc: newProc(), limits: cgLimitsFor(o.limits),
		img: o.img, releaseImage: o.releaseImage}
	if sb.img.IsHost() {
		sb.img = nil
	}
	// The job's cgroup is the spare one made after the tier's previous
	// sandbox, or else created here. A start that goes straight on to its
	// job (level 2, or a container whose job follows the base spec) has
	// it before the stage starts, and the stage is born in it (v2) or
	// joins it itself, first (v1; see stage.BaseSpec.CgroupFds): moving a
	// process in from here waits out an RCU grace period, 6–9 ms,
	// whenever the machine has been idle for a few tens of milliseconds.
	// Any other start (pooled, off the caller's path; net-granted, which
	// waits tens of milliseconds for its forwarder anyway) creates its
	// group while the stage starts and moves the stage in before it gets
	// its job (below).
	cgErr := make(chan error, 1)
	direct := o.level == airlock.LevelSyscallFilter || o.job != nil
	if direct {
		sb.cg = t.cgSpare.take(sb.limits)
		if sb.cg == nil {
			cg, err := newJobCgroup(sb.name, sb.limits, true)
			if err != nil {
				return nil, fmt.Errorf("starting sandbox: %w", err)
			}
			sb.cg = cg
		}
	}
	ready := sb.cg // before the goroutine below may set sb.cg
	if ready != nil {
		cgErr <- nil
	} else {
		go func() {
			cg, err := newJobCgroup(sb.name, sb.limits, false)
			sb.cg = cg
			cgErr <- err
		}()
	}
	joinCgroup := sync.OnceValue(func() error { return <-cgErr })
	defer func() {
		if err != nil {
			_ = joinCgroup()
			sb.destroy()
		}
	}()
	if sb.uid == 0 {
		if sb.uid, err = t.uids.get(); err != nil {
			return nil, err
		}
		sb.ownUID = true
	}
	// Descriptors for the stage: spec, status, exe, scratch, binds; then
	// its stdin, stdout and stderr.
	extra := newFdTable()
	p, err := pipes(5)
	if err != nil {
		return nil, err
	}
	specR, specW, statusR, statusW := p[0][0], p[0][1], p[1][0], p[1][1]
	stdinR, stdoutW, stderrW := p[2][0], p[3][1], p[4][1]
	sb.spec, sb.statusR, sb.status = specW, statusR, bufio.NewReaderSize(statusR, 512)
	sb.stdin, sb.stdout, sb.stderr = p[2][1], p[3][0], p[4][0]
	childEnds := []*os.File{specR, statusW, stdinR, stdoutW, stderrW}
	defer func() {
		for _, f := range childEnds {
			f.Close()
		}
	}()
	extra.set(stage.FdSpec, specR)
	extra.set(stage.FdStatus, statusW)
	extra.set(stage.FdExe, exe)

	var base stage.BaseSpec
	base.ScratchMB = o.scratchMB
	if o.level == airlock.LevelContainer {
		// The container has a loopback-only network of its own, so it may
		// have inet sockets.
		if base.Seccomp, err = sysfilter.Program(sysfilter.FilterOptions{Inet: true}); err != nil {
			return nil, fmt.Errorf("starting sandbox: %w", err)
		}
	}
	if o.scratch != "" {
		sb.scratch = o.scratch
	} else if o.level == airlock.LevelSyscallFilter || o.hostScratch {
		sb.scratch = filepath.Join(t.cfg.baseDir, sb.name)
		if err := mountScratch(sb.scratch, o.scratchMB, sb.uid); err != nil {
			return nil, fmt.Errorf("starting sandbox: %w", err)
		}
		sb.ownsScr = true
	}
	if o.level == airlock.LevelContainer && sb.scratch != "" {
		f, err := cloneTree(sb.scratch, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
		if err != nil {
			return nil, fmt.Errorf("starting sandbox: scratch: %w", err)
		}
		childEnds = append(childEnds, f)
		extra.set(stage.FdScratch, f)
		base.HasScratch = true
	}
	if o.level == airlock.LevelContainer && sb.img != nil {
		// The image's root, read-only; no descriptor of the path itself,
		// for the reasons cloneTree gives.
		f, err := cloneTree(sb.img.Root, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
		if err != nil {
			return nil, fmt.Errorf("starting sandbox: image root: %w", err)
		}
		childEnds = append(childEnds, f)
		base.RootFd = extra.add(f)
	} else if o.level == airlock.LevelContainer && !grantsUnderEtc(guestPaths(o.read, o.at)) {
		// Without a template (it could not be built) the stage builds
		// /etc itself.
		if f, err := t.etc.clone(t.cfg.baseDir); err == nil {
			childEnds = append(childEnds, f)
			base.EtcFd = extra.add(f)
		}
	}
	for _, p := range o.read {
		f, err := cloneGrant(p)
		if err != nil {
			return nil, jobs.Invalid("grants.fs.read", "%s: %v", p, err)
		}
		childEnds = append(childEnds, f)
		st, _ := f.Stat()
		target := p
		if g, ok := o.at[p]; ok {
			target = g
		}
		base.Binds = append(base.Binds, stage.BindSpec{Target: target, Fd: extra.add(f), Dir: st != nil && st.IsDir(),
			Placed: target != p, Copy: slices.Contains(o.copies, p)})
	}
	if o.egress && o.level == airlock.LevelContainer {
		dir := t.egressDirFor(sb.name)
		if err := makeEgressDir(dir); err != nil {
			return nil, fmt.Errorf("starting sandbox: %w", err)
		}
		sb.egressDir = dir
		f, err := cloneTree(dir, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
		if err != nil {
			return nil, fmt.Errorf("starting sandbox: egress directory: %w", err)
		}
		childEnds = append(childEnds, f)
		base.Binds = append(base.Binds, stage.BindSpec{Target: sandboxEgressDir, Fd: extra.add(f), Dir: true})
		base.Egress = true
		if bin.separate() {
			// The forwarder is this binary (the small stage binary has no
			// egress code); the stage executes it through this descriptor.
			self, err := selfExe()
			if err != nil {
				return nil, fmt.Errorf("starting sandbox: %w", err)
			}
			base.ForwarderFd = extra.add(self)
		}
	}

	// The stage joins (v1) or is born in (v2) a group it has before it
	// starts, unless a test has the tier move it in.
	own := ready != nil && !t.cfg.stageMove
	if own {
		for _, f := range ready.joinFiles() {
			sb.joinFds = append(sb.joinFds, extra.add(f))
		}
		base.CgroupFds = sb.joinFds // a level-2 stage gets them in its job spec
	}

	cmd := &exec.Cmd{
		Path:       stage.FdPath(stage.FdExe),
		Args:       []string{"airlock-sandbox"},
		Dir:        "/",
		Stdin:      stdinR,
		Stdout:     stdoutW,
		Stderr:     stderrW,
		ExtraFiles: extra.files,
		SysProcAttr: &syscall.SysProcAttr{
			Pdeathsig: syscall.SIGKILL,
		},
	}
	if o.level == airlock.LevelContainer {
		cmd.Env = []string{stage.Env + "=" + stage.Container, "GOMAXPROCS=1", "GOGC=off"}
		cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID | syscall.CLONE_NEWNS |
			syscall.CLONE_NEWNET | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS | cloneNewTime()
		cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(sb.uid), Size: 1}}
		cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(sb.uid), Size: 1}}
		// Become the mapped root, so the stage holds capabilities in its
		// own user namespace (and none outside it).
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: 0, Gid: 0, NoSetGroups: true}
	} else {
		cmd.Env = []string{stage.Env + "=" + stage.Filter, "GOMAXPROCS=1", "GOGC=off"}
		cmd.Dir = sb.scratch
		cmd.SysProcAttr.Setpgid = true
		// The stage drops to the job's uid itself (see filterStage):
		// switching here would make it non-dumpable before it could
		// execute itself through /proc/self/fd.
	}
	// The stage's environment holds only its marker and runtime settings
	// (one P, no GC: it allocates little and lives briefly); the program
	// gets an environment of its own (the job's secrets only).
	// A container starts through the tier's spawner (see spawner.go); a
	// level-2 stage (no user namespace: Go starts it with vfork) starts
	// here.
	var cgDir *os.File // v2: the stage is born in its cgroup
	if own && sb.joinFds == nil {
		cgDir = cloneInto(cmd, ready)
	}
	if o.level == airlock.LevelContainer {
		// Without egress nothing configures the sandbox's network, so a
		// namespace made ahead will do (see stage.netSpares).
		err = sb.startProc(&t.spawn, bin, cmd, sb.uid, !base.Egress, cgDir)
	} else {
		err = sb.startHere(cmd)
	}
	// The parent's copies of the child's ends go now, so that the stage's
	// exit is seen as end-of-file on every pipe.
	for _, f := range childEnds {
		f.Close()
	}
	childEnds = nil
	if err != nil {
		return nil, fmt.Errorf("starting sandbox: %w", err)
	}
	// A container builds its root while the parent moves it into the
	// job's cgroup: the move is done before the job spec goes out, and so
	// before the stage makes its cgroup namespace or anything of the job
	// runs. A stage that starts the egress forwarder at once is moved
	// first, so that the forwarder is born inside the cgroup.
	sendBase := func() error {
		b, err := stage.AppendBase(nil, &base)
		if err == nil {
			_, err = sb.spec.Write(b)
		}
		if err != nil {
			return fmt.Errorf("starting sandbox: sending spec: %w", err)
		}
		return nil
	}
	baseFirst := o.level == airlock.LevelContainer && !base.Egress
	if baseFirst {
		if err := sendBase(); err != nil {
			return nil, err
		}
	}

	if err := joinCgroup(); err != nil {
		return nil, fmt.Errorf("starting sandbox: %w", err)
	}
	if sb.joinFds == nil && cgDir == nil {
		if err := sb.cg.add(sb.pid); err != nil {
			return nil, fmt.Errorf("starting sandbox: joining cgroup: %w", err)
		}
	}
	if o.level == airlock.LevelContainer {
		if !baseFirst {
			if err := sendBase(); err != nil {
				return nil, err
			}
		}
		if o.job != nil {
			// Now that the stage is in its cgroup: it reads the job once
			// its root is built and it has reported ready. Only a job that
			// fits in the pipe with the base spec goes now, so that the
			// write cannot block on a stage that is still building.
			if b, err := stage.AppendJob(nil, o.job); err == nil && len(b) <= preSendMax {
				if _, err := sb.spec.Write(b); err != nil {
					return nil, fmt.Errorf("starting sandbox: sending job: %w", err)
				}
				sb.jobSent = true
			}
		}
		// A stage whose job is on its way is not waited for: its ready
		// report is read with the job's statuses (see runJob).
		if !sb.jobSent {
			if err := sb.awaitReady(ctx); err != nil {
				return nil, err
			}
		}
	}
	sb.ready = time.Now()
	return sb, nil
}

// awaitReady waits for the container stage to report its root built.
func (sb *sandbox) awaitReady(ctx context.Context) error {
	ch := make(chan error, 1)
	go func() {
		st, err := stage.ReadStatus(sb.status)
		switch {
		case err != nil:
			err = fmt.Errorf("starting sandbox: stage ended before it was ready: %w", err)
		case st.Field != "":
			err = jobs.Invalid(st.Field, "%s", st.Error)
		case st.Error != "":
			err = fmt.Errorf("starting sandbox: %s", st.Error)
		case !st.Ready:
			err = errors.New("starting sandbox: unexpected status from stage")
		}
		ch <- err
	}()
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		sb.kill()
		<-ch
		return &airlock.Stop{Reason: airlock.StopKilled, Detail: "cancelled while starting the sandbox"}
	}
}

// guestPaths lists where the read grants appear in a container.
func guestPaths(read []string, at map[string]string) []string {
	if len(at) == 0 {
		return read
	}
	out := make([]string, len(read))
	for i, p := range read {
		out[i] = airlock.FSGrant{At: at}.GuestPath(p)
	}
	return out
}

// cloneTree makes a detached copy of the mount tree at p (open_tree with
// OPEN_TREE_CLONE) with the given attributes set recursively, for the
// stage to attach with move_mount. A descriptor of the path itself would
// not do: bind mounts from another mount namespace are refused, and the
// sandbox's uid may not search the path's parents.
func cloneTree(p string, attrs uint64) (*os.File, error) {
	return cloneTreeAt(unix.AT_FDCWD, p, 0, p, attrs)
}

// cloneTreeAt is cloneTree of path relative to dirfd, with extra open_tree
// flags (AT_EMPTY_PATH: dirfd itself); name names the file.
func cloneTreeAt(dirfd int, path string, flags uint, name string, attrs uint64) (*os.File, error) {
	fd, err := unix.OpenTree(dirfd, path, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE|flags)
	if err != nil {
		return nil, err
	}
	attr := unix.MountAttr{Attr_set: attrs}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("setting mount attributes: %w", err)
	}
	return os.NewFile(uintptr(fd), name), nil
}

// cloneGrant is cloneTree, read-only, for a read grant, opened refusing
// any symbolic link on its path (a link swapped in after the grant was
// resolved and approved is not followed).
func cloneGrant(p string) (*os.File, error) {
	dir, err := hostpath.Open(p)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dir)
	return cloneTreeAt(dir, "", unix.AT_EMPTY_PATH, p, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
}

// placedDir is where the parent sees the scratch with the job's files:
// the host directory, or the container's own tmpfs through its PID 1.
func (sb *sandbox) placedDir() string {
	if sb.level == airlock.LevelContainer && sb.scratch == "" {
		return fmt.Sprintf("/proc/%d/root/scratch", sb.pid)
	}
	return sb.scratch
}

// freshScratch reports whether the sandbox's scratch is its own, new and
// empty (not a session's or a workspace's).
func (sb *sandbox) freshScratch() bool {
	if sb.level == airlock.LevelContainer {
		return sb.scratch == "" || sb.ownsScr
	}
	return sb.ownsScr
}

// kill SIGKILLs the stage and everything in its cgroup. A container's
// stage goes first (the kernel then kills and reaps its PID namespace); a
// filter stage goes last, after it has had a moment to reap the program's
// processes, which are its children — killed first, they would otherwise
// be re-parented to the host's init as zombies.
func (sb *sandbox) kill() {
	running := sb.pid != 0
	if running && sb.level == airlock.LevelSyscallFilter && sb.cg != nil {
		sb.spec.Close() // the stage's stop: it kills and reaps the program's tree
		_ = sb.cg.kill(sb.pid)
		select {
		case <-sb.waitCh:
		case <-time.After(2 * time.Second):
		}
	}
	if running {
		sb.signalKill()
	}
	if sb.cg != nil {
		_ = sb.cg.kill(0)
	}
}

// destroy kills what is left and removes every trace: cgroup, scratch
// mount (when the sandbox owns it), descriptors, the uid.
func (sb *sandbox) destroy() error {
	var errs []error
	sb.kill()
	if sb.pid != 0 {
		select {
		case <-sb.waitCh:
			sb.release()
		case <-time.After(10 * time.Second):
			errs = append(errs, fmt.Errorf("sandbox %s: stage did not exit", sb.name))
		}
	}
	if sb.cg != nil {
		if err := sb.cg.destroy(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, f := range []*os.File{sb.spec, sb.statusR, sb.stdin, sb.stdout, sb.stderr} {
		if f != nil {
			f.Close()
		}
	}
	if sb.ownsScr {
		if err := unmountScratch(sb.scratch); err != nil {
			errs = append(errs, err)
		}
	}
	if sb.egressDir != "" {
		if err := os.RemoveAll(sb.egressDir); err != nil {
			errs = append(errs, err)
		}
	}
	if sb.ownUID {
		sharedUIDsPut(sb.uid)
	}
	if sb.releaseImage != nil {
		sb.releaseImage()
	}
	return errors.Join(errs...)
}

// mountScratch mounts a tmpfs capped at mb MiB at dir, owned by uid.
func mountScratch(dir string, mb int64, uid uint32) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o711); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	opts := fmt.Sprintf("size=%dm,mode=0700,uid=%d,gid=%d", max(mb, 1), uid, uid)
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		os.Remove(dir)
		return fmt.Errorf("mounting scratch: %w", err)
	}
	return nil
}

// unmountScratch detaches the scratch mount and removes its directory.
func unmountScratch(dir string) error {
	if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmounting scratch %s: %w", dir, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("removing scratch %s: %w", dir, err)
	}
	return nil
}

// capture collects stdout and stderr up to a combined cap.
type capture struct {
	mu       sync.Mutex
	limit    int64
	total    int64
	out, err []byte
	over     chan struct{}
	overOnce sync.Once
	sink     func(airlock.Stream, []byte) // airlock.OutputSink, or nil
}

// overflowed reports whether more output came than the cap.
func (c *capture) overflowed() bool {
	select {
	case <-c.over:
		return true
	default:
		return false
	}
}

func (c *capture) read(r io.Reader, stream airlock.Stream, dst *[]byte, wg *sync.WaitGroup) {
	c.tee(r, stream, dst, nil, wg)
}

// tee is read that also writes what it keeps to w (when not nil); with a
// nil dst the bytes are counted against the cap but not kept. An attached
// job's stdout goes to its caller's pipe this way.
func (c *capture) tee(r io.Reader, stream airlock.Stream, dst *[]byte, w io.Writer, wg *sync.WaitGroup) {
	defer wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			c.mu.Lock()
			room := c.limit - c.total
			take := int64(n)
			if take > room {
				take = max(room, 0)
				c.overOnce.Do(func() { close(c.over) })
			}
			if dst != nil {
				*dst = append(*dst, buf[:take]...)
			}
			c.total += int64(n)
			if c.sink != nil && take > 0 {
				c.sink(stream, buf[:take]) // under mu: one chunk at a time
			}
			c.mu.Unlock()
			if w != nil && take > 0 {
				_, _ = w.Write(buf[:take]) // outside the lock: it may wait for the caller
			}
		}
		if err != nil {
			return
		}
	}
}

// fdTable is what a stage inherits beyond stdin, stdout and stderr: the
// fixed descriptors the stage package numbers (stage.FdSpec ... up to
// stage.FdBinds), then each added file at the next number, which add
// returns for the stage's spec.
type fdTable struct{ files []*os.File }

func newFdTable() *fdTable { return &fdTable{files: make([]*os.File, stage.FdBinds-3)} }

// set places f at the fixed descriptor fd.
func (t *fdTable) set(fd int, f *os.File) { t.files[fd-3] = f }

// add places f at the next descriptor and returns its number.
func (t *fdTable) add(f *os.File) int {
	t.files = append(t.files, f)
	return 2 + len(t.files)
}
