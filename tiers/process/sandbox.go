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
	lv      isolation // the tier's level
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

func cgLimitsFor(l airlock.Limits) cgLimits {
	return cgLimits{memoryBytes: l.MemoryMB << 20, pids: l.Pids + pidsHeadroom}
}

// start launches a stage. For a container it sends the base spec and
// waits until the root is built. What differs between the levels is the
// tier's isolation's to do (see level.go); the sequence is the same.
func (t *Tier) start(ctx context.Context, o startOptions) (_ *sandbox, err error) {
	bin, err := t.stageBin()
	if err != nil {
		return nil, fmt.Errorf("starting sandbox: %w", err)
	}
	t.lv.beforeStart(t, bin)
	sb := &sandbox{name: newName(t.cfg.baseDir), lv: t.lv, uid: o.uid, proc: newProc(), limits: cgLimitsFor(o.limits),
		img: o.img, releaseImage: o.releaseImage}
	if sb.img.IsHost() {
		sb.img = nil
	}
	ready, joinCgroup, err := t.jobCgroup(sb, t.lv.cgroupFirst(&o))
	if err != nil {
		_ = sb.destroy() // gives back the job's hold on its image
		return nil, err
	}
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
	fds := newFdTable(stage.FdBinds)
	stdio, err := sb.openPipes(fds)
	if err != nil {
		return nil, err
	}
	defer fds.closeGiven()
	fds.set(stage.FdExe, bin.file)
	base := stage.BaseSpec{ScratchMB: o.scratchMB}
	if err := t.lv.build(t, sb, &o, bin, fds, &base); err != nil {
		return nil, err
	}
	// The stage joins (v1) or is born in (v2) a group it has before it
	// starts, unless the tier moves every stage in (withParentMoves).
	own := ready != nil && !t.parentMoves
	if own {
		for _, f := range ready.joinFiles() {
			sb.joinFds = append(sb.joinFds, fds.add(f))
		}
		base.CgroupFds = sb.joinFds // a level-2 stage gets them in its job spec
	}
	cmd := &exec.Cmd{
		Path:        stage.FdPath(stage.FdExe),
		Args:        []string{"airlock-sandbox"},
		Dir:         "/",
		Stdin:       stdio[0],
		Stdout:      stdio[1],
		Stderr:      stdio[2],
		ExtraFiles:  fds.files,
		SysProcAttr: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	}
	t.lv.command(sb, cmd)
	var cgDir *os.File // v2: the stage is born in its cgroup
	if own && sb.joinFds == nil {
		cgDir = cloneInto(cmd, ready)
	}
	err = t.lv.launch(t, sb, bin, cmd, &base, cgDir)
	// The parent's copies of the child's ends go now, so that the stage's
	// exit is seen as end-of-file on every pipe.
	fds.closeGiven()
	if err != nil {
		return nil, fmt.Errorf("starting sandbox: %w", err)
	}
	enter := func() error {
		if err := joinCgroup(); err != nil {
			return fmt.Errorf("starting sandbox: %w", err)
		}
		if sb.joinFds == nil && cgDir == nil {
			if err := sb.cg.add(sb.pid); err != nil {
				return fmt.Errorf("starting sandbox: joining cgroup: %w", err)
			}
		}
		return nil
	}
	if err := t.lv.handOver(ctx, sb, &o, &base, enter); err != nil {
		return nil, err
	}
	sb.ready = time.Now()
	return sb, nil
}

// jobCgroup gives sb its job's cgroup. The group is the spare one made
// after the tier's previous sandbox, or else created here. A start that
// goes straight on to its job (first: level 2, or a container whose job
// follows the base spec) has it before the stage starts, and the stage is
// born in it (v2) or joins it itself, first (v1; see
// stage.BaseSpec.CgroupFds): moving a process in from here waits out an
// RCU grace period, 6–9 ms, whenever the machine has been idle for a few
// tens of milliseconds. Any other start (pooled, off the caller's path;
// net-granted, which waits tens of milliseconds for its forwarder anyway)
// creates its group while the stage starts and moves the stage in before
// it gets its job.
//
// It returns the group when sb has it already (nil: it is being made),
// and join, which waits until sb.cg is set and reports its failure.
func (t *Tier) jobCgroup(sb *sandbox, first bool) (ready jobCgroup, join func() error, err error) {
	cgErr := make(chan error, 1)
	if first {
		sb.cg = t.cgSpare.take(sb.limits)
		if sb.cg == nil {
			cg, err := newJobCgroup(sb.name, sb.limits, true)
			if err != nil {
				return nil, nil, fmt.Errorf("starting sandbox: %w", err)
			}
			sb.cg = cg
		}
	}
	ready = sb.cg // before the goroutine below may set sb.cg
	if ready != nil {
		cgErr <- nil
	} else {
		go func() {
			cg, err := newJobCgroup(sb.name, sb.limits, false)
			sb.cg = cg
			cgErr <- err
		}()
	}
	return ready, sync.OnceValue(func() error { return <-cgErr }), nil
}

// openPipes makes the stage's spec and status pipes and its stdin, stdout
// and stderr: the parent's ends go to sb, the child's to fds (spec and
// status at their fixed descriptors) or, for the standard streams, are
// returned, each given to the child.
func (sb *sandbox) openPipes(fds *fdTable) (stdio [3]*os.File, err error) {
	p, err := pipes(5)
	if err != nil {
		return stdio, err
	}
	sb.spec, sb.statusR, sb.status = p[0][1], p[1][0], bufio.NewReaderSize(p[1][0], 512)
	sb.stdin, sb.stdout, sb.stderr = p[2][1], p[3][0], p[4][0]
	fds.set(stage.FdSpec, fds.give(p[0][0]))
	fds.set(stage.FdStatus, fds.give(p[1][1]))
	stdio = [3]*os.File{fds.give(p[2][0]), fds.give(p[3][1]), fds.give(p[4][1])}
	// The standard streams' pipes are the program's: owned by its uid, so
	// that it may open them again by name (/dev/stdout, /dev/stderr,
	// /dev/stdin, /proc/self/fd/N), as on every other tier. A pipe made
	// here is this process's and mode 0600, which the sandbox's user
	// could not open.
	for _, f := range stdio {
		if err := f.Chown(int(sb.uid), int(sb.uid)); err != nil {
			for _, q := range p {
				q[0].Close()
				q[1].Close()
			}
			return stdio, fmt.Errorf("giving the standard streams to the sandbox's user: %w", err)
		}
	}
	return stdio, nil
}

// hostScratch gives sb its scratch directory on the host: the one o
// names, or, when fresh is set, a new tmpfs sb owns.
func (t *Tier) hostScratch(sb *sandbox, o *startOptions, fresh bool) error {
	if o.scratch != "" {
		sb.scratch = o.scratch
	} else if fresh {
		sb.scratch = filepath.Join(t.cfg.baseDir, sb.name)
		if err := mountScratch(sb.scratch, o.scratchMB, sb.uid); err != nil {
			return fmt.Errorf("starting sandbox: %w", err)
		}
		sb.ownsScr = true
	}
	return nil
}

// addGrants passes each read grant as a detached, read-only mount tree
// and names it in base.Binds.
func addGrants(o *startOptions, fds *fdTable, base *stage.BaseSpec) error {
	for _, p := range o.read {
		f, err := cloneGrant(p)
		if err != nil {
			return jobs.Invalid("grants.fs.read", "%s: %v", p, err)
		}
		fds.give(f)
		st, _ := f.Stat()
		target := p
		if g, ok := o.at[p]; ok {
			target = g
		}
		base.Binds = append(base.Binds, stage.BindSpec{Target: target, Fd: fds.add(f), Dir: st != nil && st.IsDir(),
			Placed: target != p, Copy: slices.Contains(o.copies, p)})
	}
	return nil
}

// sendBase writes the base spec to the stage.
func (sb *sandbox) sendBase(base *stage.BaseSpec) error {
	b, err := stage.AppendBase(nil, base)
	if err == nil {
		_, err = sb.spec.Write(b)
	}
	if err != nil {
		return fmt.Errorf("starting sandbox: sending spec: %w", err)
	}
	return nil
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

// placedDir is where the parent sees the scratch with the job's files.
func (sb *sandbox) placedDir() string { return sb.lv.placedDir(sb) }

// freshScratch reports whether the sandbox's scratch is its own, new and
// empty (not a session's or a workspace's).
func (sb *sandbox) freshScratch() bool { return sb.lv.freshScratch(sb) }

// kill SIGKILLs the stage and everything in its cgroup, once the level
// has stopped the program its way (see stopProgram).
func (sb *sandbox) kill() {
	running := sb.pid != 0
	if running {
		sb.lv.stopProgram(sb)
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
	opts := fmt.Sprintf("%s,mode=0700,uid=%d,gid=%d", stage.ScratchSize(mb), uid, uid)
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
	// held counts the readers that hold output they have not kept yet
	// (a slow sink holds them).
	held atomic.Int32
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
			c.held.Add(1)
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
			c.held.Add(-1)
			if w != nil && take > 0 {
				_, _ = w.Write(buf[:take]) // outside the lock: it may wait for the caller
			}
		}
		if err != nil {
			return
		}
	}
}
