//go:build linux

// Package agent is the guest side of the microvm tier: the program that is
// the guest's /init. It mounts the pseudo filesystems, loads the virtio
// modules, finds its control port, and for the one job it is handed sets
// the clock, reseeds the kernel's random number generator with host
// entropy, places the job in a memory/pids cgroup and runs it as an
// unprivileged user through a small shim (itself, re-executed), framing its
// output onto the control port. The job never touches the port: it runs as
// another user, the port's node is root-only, and a virtio port can only be
// open once.
package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/place"
	"github.com/airlock-sandbox/airlock/tiers/internal/frame"
	"github.com/airlock-sandbox/airlock/tiers/microvm/internal/wire"
)

// PortName is the virtio-serial port the host's control channel is on.
const PortName = "airlock.ctl"

// JobUID is the unprivileged user (and group) jobs run as.
const JobUID = wire.JobUID

const (
	scratchDir = "/scratch"
	// stagedScratchMB is the size the scratch and /tmp are mounted with
	// before the job is known: the host's default grant, so most jobs need
	// no remount.
	stagedScratchMB = 64
	// caDir holds the egress gateway's CA (a tmpfs: the root is read-only).
	caDir     = "/etc/airlock"
	cgroupDir = "/sys/fs/cgroup/job"
	shimFlag  = "--airlock-shim"
)

// Main is the agent's entry point. As PID 1 it runs one job and, once the
// host has hung up, powers the machine off; re-executed with the shim flag it becomes the job.
func Main() {
	if len(os.Args) == 2 && os.Args[1] == shimFlag {
		shim()
		return
	}
	err := runAgent()
	if err != nil {
		fmt.Fprintf(os.Stderr, "airlock-agent: %v\n", err)
	}
	unix.Sync()
	_ = unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	select {}
}

func runAgent() error {
	ready := wire.Ready{Version: wire.Version, Reads: true, Copies: true}
	mark := func(step string) { ready.Marks = append(ready.Marks, wire.Mark{Step: step, US: bootUS()}) }
	mark("init")
	if err := mountBase(); err != nil {
		return err
	}
	mark("mounts")
	// Staging first: the shim's start-up then overlaps the drivers' probing
	// and the port's handshake with the host, which wait on the VMM.
	dev := rootDevice()
	st, stageErr := stage(dev != "")
	mark("staged")
	loadModules("/lib/modules", "/etc/modules.order", cmdlineModules(), mark)
	mark("modules")
	if dev != "" && stageErr == nil {
		if stageErr = mountImage(dev); stageErr == nil {
			st.root, ready.Root = imageRoot, wire.RootImage
		}
		mark("image")
	}
	port, err := openPort(PortName, 10*time.Second)
	if err != nil {
		return err
	}
	defer port.Close()
	defer awaitHangUp(port) // after the last frame, before powering off
	mark("port")
	if stageErr != nil {
		return fail(port, stageErr)
	}
	if cmdlineFlag("airlock.warmup") == "1" {
		if err := warmUp(); err != nil {
			return fail(port, fmt.Errorf("warming up: %w", err))
		}
		mark("warmup")
	}
	if err := frame.WriteJSON(port, frame.Ready, ready); err != nil {
		return fmt.Errorf("announcing readiness: %w", err)
	}
	// A restored snapshot resumes here, in a new VM, with a new host.
	t, payload, err := frame.Read(port)
	if err != nil {
		return fmt.Errorf("reading the job: %w", err)
	}
	jobAt := bootUS()
	if t != frame.Job {
		return fmt.Errorf("expected a job frame, got %q", t)
	}
	var job wire.Job
	if err := json.Unmarshal(payload, &job); err != nil {
		return fail(port, fmt.Errorf("decoding the job: %w", err))
	}
	exit, err := st.run(port, &job)
	if err != nil {
		return fail(port, err)
	}
	exit.Marks = append([]wire.Mark{{Step: "job", US: jobAt}}, exit.Marks...)
	return frame.WriteJSON(port, frame.Exit, exit)
}

// awaitHangUp waits for the host to close the control port (or stop the
// VM), which it does once it has read the agent's last frame. Powering
// off at once would drop what the port has not delivered yet: output the
// host reads slowly (its caller's stream may be slow) sits in the VMM's
// queue, and the exit report behind it.
func awaitHangUp(port io.Reader) {
	buf := make([]byte, 512)
	for {
		if _, err := port.Read(buf); err != nil {
			return
		}
	}
}

// bootUS is the time since the guest kernel started, in microseconds.
func bootUS() int64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) != nil {
		return 0
	}
	return ts.Nano() / 1000
}

func fail(port io.Writer, err error) error {
	msg := err.Error()
	if len(msg) > frame.MaxSmall {
		msg = msg[:frame.MaxSmall]
	}
	_ = frame.Write(port, frame.Fail, []byte(msg))
	return err
}

func mountBase() error {
	mounts := []struct {
		src, dst, fstype, data string
		flags                  uintptr
	}{
		{"proc", "/proc", "proc", "", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC},
		{"sysfs", "/sys", "sysfs", "", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC},
		{"devtmpfs", "/dev", "devtmpfs", "mode=0755", unix.MS_NOSUID},
		// Shared memory (POSIX semaphores, Python's multiprocessing): its
		// pages are charged to the writer's memory cgroup, so the job's
		// memory limit bounds it.
		{"shm", "/dev/shm", "tmpfs", "mode=1777", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC},
		{"cgroup2", "/sys/fs/cgroup", "cgroup2", "", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC},
	}
	for _, m := range mounts {
		if err := os.MkdirAll(m.dst, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(m.src, m.dst, m.fstype, m.flags, m.data); err != nil && !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("mounting %s: %w", m.dst, err)
		}
	}
	// The links every other tier's /dev holds (devtmpfs has none):
	// scripts write to /dev/stderr and read /dev/stdin, shells use
	// /dev/fd for process substitution.
	for link, target := range map[string]string{"/dev/fd": "/proc/self/fd", "/dev/stdin": "/proc/self/fd/0", "/dev/stdout": "/proc/self/fd/1", "/dev/stderr": "/proc/self/fd/2"} {
		if err := os.Symlink(target, link); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("linking %s: %w", link, err)
		}
	}
	// Nothing may be mapped at the lowest 64 KiB (a null-pointer
	// dereference in the guest kernel stays a fault), whatever the
	// kernel's default.
	return os.WriteFile("/proc/sys/vm/mmap_min_addr", []byte("65536\n"), 0)
}

// warmUp runs a throwaway /bin/true through the same path a job takes —
// a shim of its own in a cgroup of its own, limits, privilege drop, spawn
// filter, exec, exit, reaping — and removes that cgroup. It is asked for
// (airlock.warmup=1) in VMs that will wait in a pool: under emulation the
// VMM then has that path translated before a job claims the VM. Nothing
// of it remains but warm caches: no job data was ever in this VM.
func warmUp() error {
	const dir = "/sys/fs/cgroup/warmup"
	st, err := stageShim(dir)
	if err != nil {
		return err
	}
	st.warmup = true
	if _, err := st.run(io.Discard, &wire.Job{Argv: []string{"/bin/true"}, MemoryMB: 64, Pids: 4, OpenFiles: 16, ScratchMB: stagedScratchMB}); err != nil {
		return err
	}
	// cgroup.kill has emptied it; the removal waits for the kernel to
	// notice, briefly.
	for range 100 {
		if err := unix.Rmdir(dir); err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		time.Sleep(time.Millisecond)
	}
	return fmt.Errorf("removing %s: still busy", dir)
}

// cmdlineFlag returns the value of name=value on the kernel command line.
func cmdlineFlag(name string) string {
	data, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		return ""
	}
	for _, f := range strings.Fields(string(data)) {
		if v, ok := strings.CutPrefix(f, name+"="); ok {
			return v
		}
	}
	return ""
}

// cmdlineModules returns the modules the host asked for with
// airlock.modules=a,b,c on the kernel command line (nil: all of them). The
// VMM knows which devices it gave the guest; loading only their drivers
// saves boot time under emulation.
func cmdlineModules() map[string]bool {
	v := cmdlineFlag("airlock.modules")
	if v == "" {
		return nil
	}
	want := map[string]bool{}
	for _, m := range strings.Split(v, ",") {
		want[m] = true
	}
	return want
}

// loadModules loads the modules listed in order (those in want, if want
// is not nil); a module already loaded or built in is not an error.
func loadModules(dir, orderFile string, want map[string]bool, mark func(string)) {
	data, err := os.ReadFile(orderFile)
	if err != nil {
		return
	}
	for _, name := range strings.Fields(string(data)) {
		if want != nil && !want[strings.TrimSuffix(name, ".ko")] {
			continue
		}
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			fmt.Fprintf(os.Stderr, "airlock-agent: module %s: %v\n", name, err)
			continue
		}
		if err := unix.FinitModule(int(f.Fd()), "", 0); err != nil && !errors.Is(err, unix.EEXIST) {
			fmt.Fprintf(os.Stderr, "airlock-agent: loading %s: %v\n", name, err)
		}
		f.Close()
		mark("module " + name)
	}
}

// openPort waits for the control channel and opens it: the named
// virtio-serial port (QEMU), or else a vsock connection to the host
// (Firecracker, which has no virtio-console).
func openPort(name string, wait time.Duration) (*os.File, error) {
	deadline := time.Now().Add(wait)
	for {
		ents, _ := os.ReadDir("/sys/class/virtio-ports")
		for _, e := range ents {
			n, err := os.ReadFile(filepath.Join("/sys/class/virtio-ports", e.Name(), "name"))
			if err != nil || strings.TrimSpace(string(n)) != name {
				continue
			}
			dev := filepath.Join("/dev", e.Name())
			f, err := os.OpenFile(dev, os.O_RDWR, 0)
			if err == nil {
				_ = os.Chmod(dev, 0o600)
				return f, nil
			}
		}
		if len(ents) == 0 {
			if f, err := dialVsock(vsockHostCID, vsockPort); err == nil {
				return f, nil
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("control port %s did not appear", name)
		}
		time.Sleep(time.Millisecond)
	}
}

// The host's vsock address under Firecracker.
const (
	vsockHostCID = 2
	vsockPort    = 1024
)

func dialVsock(cid, port uint32) (*os.File, error) {
	fd, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if err := unix.Connect(fd, &unix.SockaddrVM{CID: cid, Port: port}); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), "vsock"), nil
}

// reseed mixes host entropy into the input pool, credits it, and forces the
// CRNG to reseed, so VMs restored from one snapshot diverge at once.
func reseed(entropy []byte) error {
	if len(entropy) == 0 {
		return errors.New("no entropy from the host")
	}
	return mixEntropy(entropy, true)
}

// mixEntropy mixes bytes into the input pool, crediting them as entropy
// when credit is set, and forces the CRNG to reseed.
func mixEntropy(entropy []byte, credit bool) error {
	bits := int32(0)
	if credit {
		bits = int32(8 * len(entropy))
	}
	f, err := os.OpenFile("/dev/urandom", os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	// struct rand_pool_info { int entropy_count; int buf_size; __u32 buf[]; }
	buf := make([]byte, 8+len(entropy))
	*(*int32)(unsafe.Pointer(&buf[0])) = bits
	*(*int32)(unsafe.Pointer(&buf[4])) = int32(len(entropy))
	copy(buf[8:], entropy)
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.RNDADDENTROPY, uintptr(unsafe.Pointer(&buf[0]))); e != 0 {
		return fmt.Errorf("adding entropy: %w", e)
	}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.RNDRESEEDCRNG, 0); e != 0 {
		return fmt.Errorf("reseeding the CRNG: %w", e)
	}
	return nil
}

func setClock(t time.Time) error {
	if t.IsZero() {
		return nil
	}
	tv := unix.NsecToTimeval(t.UnixNano())
	return unix.Settimeofday(&tv)
}

// staged is what the agent prepares before it says Ready (and before a
// snapshot is taken): the scratch and /tmp mounts, the job's cgroup, and
// the shim, already started inside that cgroup and blocked reading its
// configuration. A job then costs no Go start-up and no mounts.
type staged struct {
	cg             *os.File
	cgDir          string
	warmup         bool   // a throwaway run: no host entropy to add
	root           string // the image root the shim chroots into ("": the initramfs)
	shim           *exec.Cmd
	cfg, stdin     *os.File // write ends
	stdout, stderr *os.File // read ends
	waited         chan struct{}
	waitErr        error
}

// stage prepares the job's world (see stageWorld) and its shim; with
// image set, the mount points of an image root too (mountImage mounts it
// once its modules are loaded).
func stage(image bool) (*staged, error) {
	if image {
		if err := prepareImageDirs(); err != nil {
			return nil, err
		}
	}
	if err := stageWorld(); err != nil {
		return nil, err
	}
	return stageShim(cgroupDir)
}

// stageWorld mounts the scratch, /tmp and the CA's tmpfs, turns the root
// read-only and enables the cgroup controllers jobs are limited by.
func stageWorld() error {
	for _, d := range []string{scratchDir, "/tmp"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		opts := fmt.Sprintf("size=%dm,mode=0755,uid=%d,gid=%d", stagedScratchMB, JobUID, JobUID)
		if d == "/tmp" {
			// Anyone's, sticky, as on every tier.
			opts = fmt.Sprintf("size=%dm,mode=1777", stagedScratchMB)
		}
		if err := unix.Mount("tmpfs", d, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
			return fmt.Errorf("mounting %s: %w", d, err)
		}
	}
	// The only place outside the scratch the agent writes for a job is the
	// egress CA: it gets a small tmpfs of its own, and the root turns
	// read-only now rather than with every job.
	if err := os.MkdirAll(caDir, 0o755); err != nil {
		return err
	}
	// Where read grants' disks are staged (see mountReads).
	if err := os.MkdirAll(readStage, 0o700); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", caDir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=64k,mode=0755"); err != nil {
		return fmt.Errorf("mounting %s: %w", caDir, err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		return fmt.Errorf("making the root read-only: %w", err)
	}
	if err := os.WriteFile("/sys/fs/cgroup/cgroup.subtree_control", []byte("+memory +pids"), 0); err != nil {
		return fmt.Errorf("enabling cgroup controllers: %w", err)
	}
	return nil
}

// stageShim makes the cgroup dir and starts the shim in it, blocked
// reading its configuration.
func stageShim(dir string) (*staged, error) {
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, err
	}
	cg, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	st := &staged{cg: cg, cgDir: dir, waited: make(chan struct{})}
	var cfgR, stdinR, stdoutW, stderrW *os.File
	pipes := []struct{ r, w **os.File }{{&cfgR, &st.cfg}, {&stdinR, &st.stdin}, {&st.stdout, &stdoutW}, {&st.stderr, &stderrW}}
	for _, p := range pipes {
		if *p.r, *p.w, err = os.Pipe(); err != nil {
			return nil, err
		}
	}
	// The standard streams' pipes are the job's: owned by its user, so
	// that it may open them again by name (/dev/stdout, /proc/self/fd/1),
	// as on every other tier. A pipe made here is root's and mode 0600.
	for _, f := range []*os.File{stdinR, stdoutW, stderrW} {
		if err := f.Chown(JobUID, JobUID); err != nil {
			return nil, fmt.Errorf("giving the standard streams to the job's user: %w", err)
		}
	}
	cmd := exec.Command("/proc/self/exe", shimFlag)
	cmd.Args[0] = "airlock-shim"
	cmd.Env = []string{}
	cmd.Dir = scratchDir
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdinR, stdoutW, stderrW
	cmd.ExtraFiles = []*os.File{cfgR}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, UseCgroupFD: true, CgroupFD: int(cg.Fd())}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the shim: %w", err)
	}
	for _, f := range []*os.File{cfgR, stdinR, stdoutW, stderrW} {
		f.Close()
	}
	st.shim = cmd
	go func() { st.waitErr = cmd.Wait(); close(st.waited) }()
	return st, nil
}

// prepare sets up the job's world: clock, entropy, limits, scratch with
// its files (the root is already read-only: see stage).
func (st *staged) prepare(job *wire.Job) error {
	if err := setClock(job.Clock); err != nil {
		return fmt.Errorf("setting the clock: %w", err)
	}
	if st.warmup {
		// The same calls as a job's, changing nothing: the clock set to
		// itself, the guest's own bytes mixed in without credit.
		own := make([]byte, 64)
		if _, err := unix.Getrandom(own, 0); err != nil {
			return err
		}
		if err := setClock(time.Now()); err != nil {
			return err
		}
		if err := mixEntropy(own, false); err != nil {
			return err
		}
	} else if err := reseed(job.Entropy); err != nil {
		return err
	}
	settings := map[string]string{
		"memory.max":      strconv.FormatInt(job.MemoryMB<<20, 10),
		"memory.swap.max": "0",
		"pids.max":        strconv.FormatInt(max(job.Pids, 1), 10),
	}
	for k, v := range settings {
		if err := os.WriteFile(filepath.Join(st.cgDir, k), []byte(v), 0); err != nil && !(k == "memory.swap.max" && errors.Is(err, os.ErrNotExist)) {
			return fmt.Errorf("setting %s: %w", k, err)
		}
	}
	if scratchMB := max(job.ScratchMB, 1); scratchMB != stagedScratchMB {
		for _, d := range []string{scratchDir, "/tmp"} {
			if err := unix.Mount("", d, "", unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%dm", scratchMB)); err != nil {
				return fmt.Errorf("sizing %s: %w", d, err)
			}
		}
	}
	// The placement every tier shares (internal/place): nothing in the
	// scratch is followed, and a name outside it is refused.
	err := place.Files(scratchDir, job.Files, place.Options{FileMode: 0o755, DirMode: 0o755, Owner: &place.Owner{UID: JobUID, GID: JobUID}})
	if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) || errors.Is(err, unix.EFBIG) {
		return fmt.Errorf("%s%w", wire.FailFilesFull, err)
	}
	if err != nil {
		return err
	}
	root := st.root
	if root == "" {
		root = "/"
	}
	if err := mountReads(root, job.Read, max(job.ScratchMB, 1)); err != nil {
		return err
	}
	if job.Net != nil {
		if err := setupNet(job.Net); err != nil {
			return fmt.Errorf("guest network: %w", err)
		}
	}
	return nil
}

// run hands the job to the waiting shim and streams its output as frames.
func (st *staged) run(port io.Writer, job *wire.Job) (wire.Exit, error) {
	defer st.cg.Close()
	var exit wire.Exit
	mark := func(step string) { exit.Marks = append(exit.Marks, wire.Mark{Step: step, US: bootUS()}) }
	if err := st.prepare(job); err != nil {
		return wire.Exit{}, err
	}
	mark("prepared")
	cfg, err := json.Marshal(shimConfig{Argv: job.Argv, Env: job.Env, CPUMS: job.CPUMS, OpenFiles: job.OpenFiles, Spawn: job.Spawn, Root: st.root})
	if err != nil {
		return wire.Exit{}, err
	}
	if _, err := st.cfg.Write(cfg); err != nil {
		return wire.Exit{}, fmt.Errorf("configuring the shim: %w", err)
	}
	st.cfg.Close()
	mark("handed")
	go func() {
		_, _ = st.stdin.Write(job.Stdin)
		st.stdin.Close()
	}()
	out := frame.NewOutput(port, -1) // the host stops the job at its output cap
	var copies sync.WaitGroup
	for _, s := range []struct {
		r *os.File
		t frame.Type
	}{{st.stdout, frame.Stdout}, {st.stderr, frame.Stderr}} {
		copies.Add(1)
		go func() {
			defer copies.Done()
			out.Copy(s.r, s.t)
		}()
	}
	// A fork the process limit refused stops the job at once, as on every
	// tier: a fork bomb ends instead of spinning until a limit of another
	// kind. The cgroup's pids.events is polled while the job runs.
	stopWatch := make(chan struct{})
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopWatch:
				return
			case <-tick.C:
				if pidsHit(st.cgDir) {
					_ = os.WriteFile(filepath.Join(st.cgDir, "cgroup.kill"), []byte("1"), 0)
					return
				}
			}
		}
	}()
	<-st.waited
	close(stopWatch)
	mark("exited")
	// Whatever the job left behind dies with its cgroup; then the pipes
	// reach EOF once read, however slowly the host takes the output. A
	// straggler holding them open cannot delay the report long.
	_ = os.WriteFile(filepath.Join(st.cgDir, "cgroup.kill"), []byte("1"), 0)
	drained := make(chan struct{})
	go func() { copies.Wait(); close(drained) }()
	out.Drain(drained, 2*time.Second)
	mark("drained")
	if len(job.Collect) > 0 {
		sendCollected(port, job.Collect)
		mark("collected")
	}
	if ws, ok := st.shim.ProcessState.Sys().(syscall.WaitStatus); ok {
		switch {
		case ws.Signaled():
			exit.Code = 128 + int(ws.Signal())
			exit.Signal = unix.SignalName(ws.Signal())
		default:
			exit.Code = ws.ExitStatus()
		}
	} else if st.waitErr != nil {
		return exit, st.waitErr
	}
	exit.MemoryBytes, exit.CPUUS = memoryPeak(st.cgDir), cpuUsedUS(st.cgDir)
	if ev, err := os.ReadFile(filepath.Join(st.cgDir, "memory.events")); err == nil && eventCount(string(ev), "oom_kill") > 0 {
		exit.Reason = "memory"
	} else if pidsHit(st.cgDir) {
		exit.Reason = "pids"
	} else if exit.Signal == "SIGXCPU" || (exit.Signal == "SIGKILL" && job.CPUMS > 0 && cpuUsedMS(st.cgDir) >= job.CPUMS) {
		exit.Reason = "cpu"
	}
	return exit, nil
}

// pidsHit reports whether the cgroup's process limit refused a fork.
func pidsHit(cgDir string) bool {
	ev, err := os.ReadFile(filepath.Join(cgDir, "pids.events"))
	return err == nil && eventCount(string(ev), "max") > 0
}

// memoryPeak is the cgroup's peak memory (memory.peak; 0 where the
// kernel has none).
func memoryPeak(cgDir string) int64 {
	data, err := os.ReadFile(filepath.Join(cgDir, "memory.peak"))
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	return n
}

func cpuUsedMS(cgDir string) int64 { return cpuUsedUS(cgDir) / 1000 }

// cpuUsedUS is the cgroup's CPU time in microseconds.
func cpuUsedUS(cgDir string) int64 {
	data, err := os.ReadFile(filepath.Join(cgDir, "cpu.stat"))
	if err != nil {
		return 0
	}
	return eventCount(string(data), "usage_usec")
}

func eventCount(data, key string) int64 {
	for _, line := range strings.Split(data, "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == key {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
