package stage

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/place"
	"github.com/airlock-sandbox/airlock/role"
	"github.com/airlock-sandbox/airlock/tiers/internal/execguard"
)

// Roles are the stages this package runs in a binary the tier re-executes
// (the airlock binary, a test binary, the stage binary), dispatched by
// that binary's main through package role. Worker stages are the worker
// package's, the egress forwarder the process package's.
//
// The container and filter stages never return, and run on the startup
// thread while it is locked to them (see package role): the restrictions
// they apply per thread (namespaces unshared, Landlock, the seccomp
// filter) stay on the thread that forks the program. They do not call
// runtime.LockOSThread themselves: in an init function, where the runtime
// holds the lock, that would start the runtime's template thread (a
// thread creation on every cold start), and while the template thread
// exists new threads are cloned from it rather than from the locked one,
// whose restrictions they would otherwise inherit.
var Roles = []role.Role{
	{Name: Container, Main: containerStage},
	{Name: Filter, Main: filterStage},
	{Name: Digest, Main: printDigest},
	// gVisor's exec guard: the stage binary is what a gVisor sandbox
	// starts it from, in place of the large binary.
	{Name: execguard.RoleName, Main: execguard.Main},
	{Name: Spawner, Main: func() int {
		// Locked: its children's parent-death signal follows the thread
		// that forked them.
		runtime.LockOSThread()
		return spawner()
	}},
}

// stagePipes returns the spec reader, the status writer and fail, which
// reports an error on the status pipe and returns the stage's exit code.
func stagePipes() (specPipe, statusPipe, func(error) int) {
	specF := os.NewFile(FdSpec, "spec")
	statusF := os.NewFile(FdStatus, "status")
	closeInherited()
	enc := statusPipe{statusF}
	// Buffered: a cold job's spec arrives with the base spec, and one read
	// takes both.
	return specPipe{bufio.NewReaderSize(specF, 64<<10)}, enc, func(err error) int {
		st := Status{Error: err.Error()}
		var fe *FieldError
		if errors.As(err, &fe) {
			st.Field, st.Error = fe.Field, fe.Msg
		}
		_ = enc.send(st)
		return 1
	}
}

// containerStage is PID 1 of a level-3 sandbox: it builds the root, waits
// for the job, forks the program under Landlock and seccomp, reaps every
// orphan and reports how the program ended. When it returns, the kernel
// kills whatever is left in the PID namespace.
func containerStage() int {
	dec, enc, fail := stagePipes()
	base, err := dec.base()
	if err != nil {
		return fail(fmt.Errorf("reading base spec: %w", err))
	}
	if err := joinCgroup(base.CgroupFds); err != nil {
		return fail(err)
	}
	// A sandbox that may get a net-granted job starts its forwarder first:
	// its start-up overlaps building the root (pivot_root moves it into
	// the new root with us) and, for a pooled sandbox, the wait for a job.
	fwdExe := FdExe
	if base.ForwarderFd > 0 {
		fwdExe = base.ForwarderFd
		unix.CloseOnExec(fwdExe)
	}
	var fwd *forwarder
	if base.Egress {
		if fwd, err = startForwarder(fwdExe); err != nil {
			return fail(err)
		}
	}
	lay, err := buildRoot(&base)
	if err != nil {
		return fail(fmt.Errorf("building sandbox root: %w", err))
	}
	// The Landlock rules (the root's mounts are final) and the seccomp
	// program are prepared before the job arrives: off a pooled claim's path.
	rules := containerLandlock(base.Binds, lay)
	seccompProg, err := parseFilter(base.Seccomp)
	if err != nil {
		return fail(err)
	}
	if err := enc.send(Status{Ready: true}); err != nil {
		return 1
	}
	job, err := dec.job()
	if err != nil {
		return fail(fmt.Errorf("reading job spec: %w", err))
	}
	if err := resizeScratch(&base, &job); err != nil {
		return fail(err)
	}
	if err := settleForwarder(fwd, fwdExe, job.Egress); err != nil {
		return fail(err)
	}
	if err := placeFiles("/scratch", job.Files); err != nil {
		return fail(err)
	}
	if err := awaitGo(dec, enc, &job); err != nil {
		return fail(err)
	}
	// The cgroup namespace is made here rather than at clone, so that it
	// is rooted at the job's own cgroup (the parent moved us there before
	// sending the job spec); it takes effect for the children of this
	// thread. The time namespace is made at clone (TimeNamespaces): one
	// unshared here would make every vfork-style fork (Go's ForkExec)
	// fail with EINVAL on kernels before 6.3, which refuse a child that
	// shares its parent's memory but not its time namespace.
	if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
		return fail(fmt.Errorf("cgroup namespace: %w", err))
	}
	// In an image, a bare name is looked up in the image's PATH (the
	// tier sets one); the host view looks in the fixed directories.
	lookup := lookProgram
	if lay.image {
		lookup = func(name string) (string, error) { return lookProgramPath(name, job.Env) }
	}
	prog, err := lookup(job.Argv[0])
	if err != nil {
		_ = enc.send(startFailure(job.Argv[0], err))
		return 0
	}
	if err := SetRlimits(job.Rlimits); err != nil {
		return fail(err)
	}
	// The program is root in the sandbox's user namespace only; it gets
	// no capabilities even there (empty bounding set), and PID 1 is not
	// dumpable, so the program cannot reach into it through /proc/1.
	if err := dropCapabilities(); err != nil {
		return fail(err)
	}
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fail(fmt.Errorf("making PID 1 non-dumpable: %w", err))
	}
	oomAdj, err := os.OpenFile("/proc/self/oom_score_adj", os.O_WRONLY, 0)
	if err != nil {
		return fail(err)
	}
	if job.NoExec {
		if rules, err = execOnly(rules, prog, sealCopy); err != nil {
			return fail(err)
		}
		if seccompProg, err = parseFilter(base.SeccompNoExec); err != nil {
			return fail(err)
		}
	}
	if err := confine(rules, nil, seccompProg); err != nil {
		return fail(err)
	}
	shieldPID1()
	return supervise(enc, startHere, prog, "/scratch", &job, oomAdj, nil)
}

// shieldPID1 keeps the program from ending the stage, PID 1 of its
// namespace, with a signal. The kernel passes PID 1 a signal from inside
// its namespace only if PID 1 handles it, and Go's runtime handles most,
// ending the process for many (TERM, QUIT, a SEGV sent by kill): those
// are caught here and dropped instead. Caught, not ignored, so the program
// starts with every disposition at its default, as an ignored one would
// stay ignored across its exec.
func shieldPID1() {
	ch := make(chan os.Signal, 8)
	signal.Notify(ch, syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGILL, syscall.SIGTRAP,
		syscall.SIGABRT, syscall.SIGBUS, syscall.SIGFPE, syscall.SIGUSR1, syscall.SIGSEGV, syscall.SIGUSR2,
		syscall.SIGPIPE, syscall.SIGALRM, syscall.SIGTERM, syscall.SIGSTKFLT, syscall.SIGXCPU, syscall.SIGXFSZ,
		syscall.SIGVTALRM, syscall.SIGPROF, syscall.SIGIO, syscall.SIGPWR, syscall.SIGSYS)
	go func() {
		for range ch {
		}
	}()
}

// joinCgroup moves the calling thread into the job's cgroup by writing
// "0" to each of fds (v1 "tasks" files, opened by the parent; writing one
// moves a single thread) and closes them. A thread moving itself is the
// one migration the kernel makes without write-locking its global
// threadgroup semaphore, and the first such write-lock after a quiet
// spell waits out an RCU grace period (6–9 ms here): the parent writing
// the stage's pid to cgroup.procs paid it on every start that followed a
// few tens of milliseconds of idleness. The stage runs on its startup
// thread (see init), so what it forks — the forwarder, the program — is
// born inside; the runtime's threads started before this stay outside
// and run none of the job's code.
func joinCgroup(fds []int) error {
	err := joinCgroupOpen(fds)
	for _, fd := range fds {
		unix.Close(fd)
	}
	return err
}

// joinCgroupOpen is joinCgroup leaving fds open, for another thread to
// join too (see startConfined).
func joinCgroupOpen(fds []int) error {
	for _, fd := range fds {
		if _, err := unix.Write(fd, []byte("0")); err != nil {
			return fmt.Errorf("joining the job's cgroup: %w", err)
		}
	}
	return nil
}

// supervise forks the program from the calling (confined) thread, reaps
// every process re-parented to us, and reports how the program ended.
// Once the program has exited, killRest (if set) kills what it left
// running, and those are reaped too; without it (PID 1 of a namespace)
// the kernel kills them when we return.
//
// oomAdj is this process's /proc/self/oom_score_adj, opened before
// Landlock: the program is forked with the highest score (1000), and the
// stage returns to 0 at once, so that the memory limit's OOM killer takes
// the program's processes, never the stage that must reap them.
func supervise(enc statusPipe, start startFunc, prog, dir string, job *JobSpec, oomAdj *os.File, killRest func() int) int {
	stdin := uintptr(0)
	if !job.Stdin {
		stdin = devNullFd()
	}
	_, _ = oomAdj.WriteAt([]byte("1000"), 0)
	pid, release, err := start(prog, job.Argv, &syscall.ProcAttr{
		Dir:   dir,
		Env:   job.Env,
		Files: []uintptr{stdin, 1, 2},
		Sys:   &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL},
	})
	_, _ = oomAdj.WriteAt([]byte("0"), 0)
	defer release()
	if errors.Is(err, syscall.E2BIG) {
		// The job's arguments and environment together are more than
		// the kernel takes: the job's mistake.
		_ = enc.send(Status{Field: "argv", Error: fmt.Sprintf("starting %s: the arguments and environment are too long for Linux to start the program (%v)", job.Argv[0], err)})
		return 0
	}
	if _, _, ok := execguard.StartFailure(job.Argv[0], err); ok {
		_ = enc.send(startFailure(job.Argv[0], err))
		return 0
	}
	if err != nil {
		_ = enc.send(Status{Error: fmt.Sprintf("starting %s: %v", job.Argv[0], err)})
		return 0
	}
	// Nothing but the program writes to the job's output from here on.
	os.Stdout.Close()
	os.Stderr.Close()
	st := reap(pid)
	if killRest != nil {
		for range 500 { // kill and reap until nothing else is left (bounded)
			others := killRest()
			for {
				if p, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil); p <= 0 || err != nil {
					break
				}
			}
			if others == 0 {
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
		for {
			if _, err := syscall.Wait4(-1, nil, 0, nil); errors.Is(err, syscall.ECHILD) {
				break
			} else if err != nil && !errors.Is(err, syscall.EINTR) {
				break
			}
		}
	}
	_ = enc.send(st)
	return 0
}

// startFunc forks and executes the program; release ends what the start
// kept for the program's life (see startConfined).
type startFunc func(path string, argv []string, attr *syscall.ProcAttr) (pid int, release func(), err error)

// startHere forks the program from the calling thread, which holds the
// job's restrictions already.
func startHere(path string, argv []string, attr *syscall.ProcAttr) (int, func(), error) {
	pid, err := syscall.ForkExec(path, argv, attr)
	return pid, func() {}, err
}

// reap waits for the program, reaping every orphan re-parented to us on
// the way, and returns how the program ended.
func reap(pid int) Status {
	for {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(-1, &ws, 0, nil)
		if err != nil {
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			return Status{Exited: true, Error: "waiting for the program: " + err.Error()}
		}
		if got != pid {
			continue
		}
		if ws.Signaled() {
			return Status{Exited: true, Code: 128 + int(ws.Signal()), Signal: int(ws.Signal())}
		}
		return Status{Exited: true, Code: ws.ExitStatus()}
	}
}

// closeInherited marks every descriptor from FdFirst on close-on-exec: the
// stage's own (spec, status, binary, scratch, grants) and whatever the
// process that started the tier left open without the flag (a supervisor's
// pipe, say). Nothing the stage executes — the program, the forwarder —
// gets any descriptor but those it is handed explicitly.
func closeInherited() {
	if unix.CloseRange(FdFirst, ^uint(0), unix.CLOSE_RANGE_CLOEXEC) == nil {
		return
	}
	// Before Linux 5.11: one by one.
	entries, _ := os.ReadDir("/proc/self/fd")
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd >= FdFirst {
			unix.CloseOnExec(fd)
		}
	}
}

func devNullFd() uintptr {
	fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0
	}
	return uintptr(fd)
}

// confine sets no_new_privs, Landlock and seccomp (guard, if any, then
// prog, which may refuse seccomp itself) on the calling thread; everything
// it forks or executes inherits them.
func confine(rules []llRule, guard, prog filter) error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	if err := landlockRestrict(rules); err != nil {
		return err
	}
	if guard != nil {
		if err := guard.load(false); err != nil {
			return err
		}
	}
	return prog.load(false)
}

// dropCapabilities empties the calling thread's bounding and ambient
// sets, so what it executes holds no capabilities although it runs as the
// namespace's root.
func dropCapabilities() error {
	for c := 0; c <= unix.CAP_LAST_CAP; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("dropping capability %d: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clearing ambient capabilities: %w", err)
	}
	return nil
}

func SetRlimits(rl []Rlimit) error {
	for _, r := range rl {
		lim := unix.Rlimit{Cur: r.Cur, Max: r.Max}
		if err := unix.Setrlimit(r.Resource, &lim); err != nil {
			// Without CAP_SYS_RESOURCE a limit cannot rise above the
			// current hard limit: clamp to it rather than fail.
			var cur unix.Rlimit
			if unix.Getrlimit(r.Resource, &cur) == nil && (r.Max > cur.Max || r.Cur > cur.Max) {
				lim = unix.Rlimit{Cur: min(r.Cur, cur.Max), Max: min(r.Max, cur.Max)}
				err = unix.Setrlimit(r.Resource, &lim)
			}
			if err != nil {
				return fmt.Errorf("setrlimit %d: %w", r.Resource, err)
			}
		}
	}
	return nil
}

// programDirs is where a bare program name is looked up when the
// program's environment has no PATH (the host view's).
var programDirs = []string{"/usr/local/bin", "/usr/bin", "/bin", "/usr/local/sbin", "/usr/sbin", "/sbin"}

// lookProgramPath looks name up in the directories of env's PATH (an
// image's, inside its root), or else in programDirs.
func lookProgramPath(name string, env []string) (string, error) {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			return lookProgramIn("", name, strings.Split(v, ":"))
		}
	}
	return lookProgram(name)
}

func lookProgram(name string) (string, error) { return lookProgramIn("", name, programDirs) }

func lookProgramDirs(name string, dirs []string) (string, error) {
	if strings.Contains(name, "/") {
		p := name
		if !path.IsAbs(p) {
			p = path.Join("/scratch", p)
		}
		if err := unix.Access(p, unix.X_OK); err != nil {
			return "", fmt.Errorf("program %s: %w", name, err)
		}
		return p, nil
	}
	for _, d := range dirs {
		if !path.IsAbs(d) {
			continue // a relative PATH entry would name the scratch
		}
		p := path.Join(d, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("program %q not found: %w", name, unix.ENOENT)
}

// startFailure is the status of a program that could not be started:
// not there (127) or not executable (126), in the words every tier uses
// (execguard.StartFailure).
func startFailure(name string, err error) Status {
	code, line, ok := execguard.StartFailure(name, err)
	if !ok {
		return Status{Error: fmt.Sprintf("starting %s: %v", name, err)}
	}
	return Status{Error: strings.TrimPrefix(line, "airlock: "), NotFound: code == 127, NoExec: code == 126}
}

// awaitGo reports the files placed and waits for the parent's go-ahead
// (the parent inspects what was placed first: see airlock.CheckPlaced).
func awaitGo(dec specPipe, enc statusPipe, job *JobSpec) error {
	if job.Go {
		return nil
	}
	if err := enc.send(Status{Placed: true}); err != nil {
		return err
	}
	if err := dec.next(); err != nil {
		return fmt.Errorf("waiting for the go-ahead: %w", err)
	}
	return nil
}

// placeFiles writes the job's files into dir (see internal/place): a
// session's or workspace's scratch holds what earlier jobs left, and a
// link, hard link or special file there refuses the placement before
// anything is written, rather than being written through. The files are
// made by this stage, already the sandbox's root or the job's user, so
// they need no chown.
//
// Files that do not fit in the scratch (its size or its inodes) are the
// job's mistake, refused as its files field, not the sandbox's failure.
func placeFiles(dir string, files map[string]string) error {
	err := place.Files(dir, files, place.Options{FileMode: 0o755, DirMode: 0o755})
	if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) || errors.Is(err, unix.EFBIG) {
		return &FieldError{Field: "files", Msg: "the files do not fit in the scratch (grants.fs.scratch_mb): " + err.Error()}
	}
	return err
}

// filterStage is the level-2 stage: already in the job's cgroup, it
// becomes the job's unprivileged uid, sets rlimits, Landlock (system
// paths and grants read-only, the scratch writable; without spawn,
// execution of nothing but the program: see execOnly) and seccomp, and then
// supervises the program as a subreaper: when the program exits, what it
// left running is killed and reaped.
func filterStage() int {
	dec, enc, fail := stagePipes()
	job, err := dec.job()
	if err != nil {
		return fail(fmt.Errorf("reading job spec: %w", err))
	}
	// Joined by this thread, so that /proc/self/cgroup names the group,
	// and again by the thread that forks the program (startConfined).
	if err := joinCgroupOpen(job.CgroupFds); err != nil {
		return fail(err)
	}
	if err := hideProcesses(); err != nil {
		return fail(err)
	}
	procs, err := openCgroupProcs()
	if err != nil {
		return fail(fmt.Errorf("finding own cgroup: %w", err))
	}
	oomAdj, err := os.OpenFile("/proc/self/oom_score_adj", os.O_WRONLY, 0)
	if err != nil {
		return fail(err)
	}
	// Orphans of the program are re-parented to this stage, which reaps them.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fail(fmt.Errorf("becoming a subreaper: %w", err))
	}
	// Without spawn the program may execute only itself (see execOnly),
	// and sealing a program in the scratch needs a capability the stage
	// gives up as the job's user: one thread keeps it until then.
	var admin *adminThread
	if job.NoExec {
		if admin, err = startAdminThread(); err != nil {
			return fail(err)
		}
	}
	if err := becomeUser(job.UID); err != nil {
		return fail(err)
	}
	if err := placeFiles(job.Scratch, job.Files); err != nil {
		return fail(err)
	}
	if err := awaitGo(dec, enc, &job); err != nil {
		return fail(err)
	}
	// Looked up once the files are placed: a placed script may be the
	// program ("./run.sh").
	prog, err := lookProgramIn(job.Scratch, job.Argv[0], programDirs)
	if err != nil {
		_ = enc.send(startFailure(job.Argv[0], err))
		return 127
	}
	if err := SetRlimits(job.Rlimits); err != nil {
		return fail(err)
	}
	seccompProg, err := parseFilter(job.Seccomp)
	if err != nil {
		return fail(err)
	}
	rules := filterLandlock(job.Scratch, job.ReadPaths)
	if admin != nil {
		scratch, err := realPath(job.Scratch)
		if err != nil {
			return fail(fmt.Errorf("finding the scratch: %w", err))
		}
		s := &filterSealer{admin: admin, scratch: scratch, uid: job.UID}
		rules, err = execOnly(rules, prog, s.seal)
		if err != nil {
			return fail(err)
		}
		if err := admin.end(); err != nil {
			return fail(err)
		}
	}
	// The parent stops a job (timeout, cancel, output cap) by closing the
	// spec pipe: the stage then kills the program's processes itself, so
	// that it reaps them; killed by the parent, they would become the host
	// init's zombies. (A pipe rather than a signal keeps os/signal, and its
	// place in the initialisation order, out of the stage.)
	go func() {
		_ = dec.next()  // returns at end of file: the parent's stop
		for range 400 { // until the stage exits; bounded
			killCgroupPeers(procs)
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return supervise(enc, startConfined(rules, seccompProg, job.CgroupFds), prog, job.Scratch, &job, oomAdj, func() int { return killCgroupPeers(procs) })
}

// hideProcesses mounts, in the level-2 stage's own mount namespace, a
// /proc of the host's PID namespace that shows each process only the
// processes it may trace (hidepid): the program sees its own, not the
// host's nor other jobs' (their command lines, which any user could
// otherwise read). Mounts are made slaves first, so nothing propagates
// back to the host.
func hideProcesses() error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return fmt.Errorf("making the stage's mounts slaves: %w", err)
	}
	flags := uintptr(unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC)
	err := unix.Mount("proc", "/proc", "proc", flags, "hidepid=invisible")
	if errors.Is(err, unix.EINVAL) { // before Linux 5.8
		err = unix.Mount("proc", "/proc", "proc", flags, "hidepid=2")
	}
	if err != nil {
		return fmt.Errorf("mounting /proc: %w", err)
	}
	return nil
}

// resizeScratch gives the container's own scratch tmpfs and its /tmp the
// job's size, when it asks for another than the base spec's.
func resizeScratch(base *BaseSpec, job *JobSpec) error {
	if job.ScratchMB > 0 && job.ScratchMB != base.ScratchMB {
		dirs := []string{"/tmp"}
		if !base.HasScratch {
			dirs = append(dirs, "/scratch")
		}
		for _, d := range dirs {
			if err := unix.Mount("", d, "", unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NODEV,
				ScratchSize(job.ScratchMB)); err != nil {
				return fmt.Errorf("resizing %s: %w", d, err)
			}
		}
	}
	return nil
}

// settleForwarder readies the egress forwarder for the job: started (from
// the binary at descriptor exe) if it is not running yet, and listening,
// for a net-granted job (egress); stopped for any other.
func settleForwarder(fwd *forwarder, exe int, egress bool) error {
	var err error
	switch {
	case egress && fwd == nil:
		// Binding port 53 and setting lo up need the capabilities this
		// stage holds in the sandbox's namespaces until it drops them.
		if fwd, err = startForwarder(exe); err != nil {
			return err
		}
		fallthrough
	case egress:
		return fwd.wait()
	case fwd != nil:
		// No net grant: nothing may listen on loopback for the program.
		return fwd.stop()
	}
	return nil
}

// openCgroupProcs opens the process list of our own cgroup (the pids
// controller's on v1), to be read after Landlock forbids opening it.
func openCgroupProcs() (*os.File, error) {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[1] == "" && cgroupV2():
			return os.Open(path.Join(cgroupRoot, parts[2], "cgroup.procs"))
		case parts[1] == "pids":
			return os.Open(path.Join(cgroupRoot, "pids", parts[2], "cgroup.procs"))
		}
	}
	return nil, errors.New("own cgroup not found")
}

// killCgroupPeers SIGKILLs every other process in our cgroup and returns
// how many there were (zombies included, until they are reaped).
func killCgroupPeers(procs *os.File) int {
	self := os.Getpid()
	buf := make([]byte, 64<<10)
	n, err := procs.ReadAt(buf, 0)
	if n == 0 && err != nil {
		return 0
	}
	others := 0
	for _, f := range strings.Fields(string(buf[:n])) {
		if pid, err := strconv.Atoi(f); err == nil && pid != self {
			others++
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	return others
}

// becomeUser drops every group and becomes uid (as uid and gid) for good,
// losing all capabilities; the parent-death signal, which a credential
// change clears, is set again.
func becomeUser(uid uint32) error {
	if uid == 0 {
		return errors.New("refusing to run a job as root")
	}
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("dropping groups: %w", err)
	}
	if err := syscall.Setresgid(int(uid), int(uid), int(uid)); err != nil {
		return fmt.Errorf("setting gid: %w", err)
	}
	if err := syscall.Setresuid(int(uid), int(uid), int(uid)); err != nil {
		return fmt.Errorf("setting uid: %w", err)
	}
	return unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0, 0, 0)
}

// filterLandlock is the level-2 filesystem view: the same system
// directories and /etc entries a container sees (read-only), /proc, the
// device nodes, the granted paths (read-only, and only as far as the
// job's uid may read them) and the scratch (read-write). The rest of the
// host — /home, /root, /var, /srv, other users' /tmp files — is refused.
func filterLandlock(scratch string, read []string) []llRule {
	var rules []llRule
	add := func(p string, access uint64) {
		if _, err := os.Stat(p); err == nil {
			rules = append(rules, llRule{Path: p, Access: access})
		}
	}
	add("/usr", llRead|llExec)
	for _, name := range usrLinks {
		add("/"+name, llRead|llExec)
	}
	for _, name := range etcAllow {
		add("/etc/"+name, llRead)
	}
	for _, name := range []string{"passwd", "group", "hosts", "hostname"} {
		add("/etc/"+name, llRead)
	}
	add("/proc", llRead)
	for _, n := range devNodes {
		add("/dev/"+n, llRead|unix.LANDLOCK_ACCESS_FS_WRITE_FILE)
	}
	for _, p := range read {
		add(p, llRead)
	}
	add(scratch, rwAccess())
	return rules
}

// lookProgramIn looks name up: a relative path in scratch ("": the
// working directory), a bare name in dirs.
func lookProgramIn(scratch, name string, dirs []string) (string, error) {
	if scratch != "" && strings.Contains(name, "/") && !path.IsAbs(name) {
		p := path.Join(scratch, name)
		if err := unix.Access(p, unix.X_OK); err != nil {
			// Named as the job named it: the scratch's host path is the
			// machine's, not the job's.
			return "", fmt.Errorf("program %s: %w", name, err)
		}
		return p, nil
	}
	return lookProgramDirs(name, dirs)
}

const cgroupRoot = "/sys/fs/cgroup"

// cgroupV2 reports whether the unified hierarchy is mounted at the cgroup
// root (the stage does not link a cgroup library: see the package doc).
func cgroupV2() bool {
	var st unix.Statfs_t
	return unix.Statfs(cgroupRoot, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC
}
