package stage

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// The spawner starts sandboxes for the process package. Forking is what
// makes a user namespace expensive from a large process: Go starts a child
// in a new user namespace with a full fork (it must write the child's id
// maps before the child goes on), which copies the caller's page tables —
// about 27 ms from a process with a 1 GiB heap here, against 0.7 ms from a
// small one. This small process forks instead: the parent sends it each
// sandbox's descriptors and settings over a socket, it starts the stage
// and returns the pid and a pidfd, and it reports each stage's exit.
//
// It runs single-threaded logic on GOMAXPROCS=1 and needs no signals: it
// polls the socket and its children's pidfds. When the socket closes (the
// parent closed the tier or died) it kills what it started and exits; its
// children die with it in any case (their parent-death signal).

// The spawner's descriptors.
const (
	FdSpawner    = FdFirst + iota // its end of its socket (SOCK_SEQPACKET)
	FdSpawnerExe                  // its binary, executed through /proc/self/fd
)

// SpawnRequest asks the spawner to start a stage. The descriptors travel
// as SCM_RIGHTS in the same message: stdin, stdout, stderr, then the
// stage's descriptors from 3 on.
type SpawnRequest struct {
	Path       string
	Args       []string
	Env        []string
	Dir        string
	Cloneflags uintptr
	// UID is the host uid and gid the sandbox's root is mapped to.
	UID uint32
	// SpareNet lets the spawner give the stage a network namespace it
	// made ahead (see netSpares) in place of CLONE_NEWNET, for a stage
	// that configures nothing in its network namespace.
	SpareNet bool
	// IntoCgroup: the request's last descriptor is a cgroup v2 directory,
	// which the stage is born in (clone3's CLONE_INTO_CGROUP) instead of
	// being moved in afterwards; the stage does not inherit it.
	IntoCgroup bool
}

// SpawnMessage is what the spawner sends: a reply to a request (Pid, or
// Error; a pidfd travels with a successful reply) or, later, a stage's exit.
type SpawnMessage struct {
	Pid   int
	Error string
	// SpareNet says the stage got a network namespace made ahead.
	SpareNet bool
	Exited   int // the pid that exited
	Status   int // its wait status
}

// spawnMaxFds bounds the descriptors of one request (SCM_MAX_FD is 253).
const spawnMaxFds = 250

// spawner is the Spawner stage.
func spawner() int {
	sock := FdSpawner
	// Neither the socket, nor the binary, nor anything the tier's process
	// left open may reach a stage: only the descriptors of its request do.
	closeInherited()
	trimMounts()
	nets := startNetSpares()
	children := map[int]int{} // pidfd → pid
	buf := make([]byte, 1<<20)
	oob := make([]byte, unix.CmsgSpace(4*spawnMaxFds))
	send := func(m SpawnMessage, fds ...int) bool {
		b := AppendSpawnMessage(nil, &m)
		var rights []byte
		if len(fds) > 0 {
			rights = unix.UnixRights(fds...)
		}
		return unix.Sendmsg(sock, b, rights, nil, 0) == nil
	}
	for {
		pfds := make([]unix.PollFd, 0, 1+len(children))
		pfds = append(pfds, unix.PollFd{Fd: int32(sock), Events: unix.POLLIN})
		for fd := range children {
			pfds = append(pfds, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
		}
		if _, err := unix.Poll(pfds, -1); err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return 1
		}
		for _, p := range pfds[1:] {
			if p.Revents == 0 {
				continue
			}
			fd := int(p.Fd)
			pid := children[fd]
			var ws syscall.WaitStatus
			for {
				if _, err := syscall.Wait4(pid, &ws, 0, nil); !errors.Is(err, syscall.EINTR) {
					break
				}
			}
			unix.Close(fd)
			delete(children, fd)
			if !send(SpawnMessage{Exited: pid, Status: int(ws)}) {
				return killAll(children)
			}
		}
		if pfds[0].Revents == 0 {
			continue
		}
		n, oobn, _, _, err := unix.Recvmsg(sock, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err != nil && errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n == 0 {
			return killAll(children) // the parent is gone
		}
		fds, perr := ReceivedFds(oob[:oobn])
		pid, pidfd, spare, serr := spawnOne(buf[:n], fds, nets)
		for _, fd := range fds {
			unix.Close(fd)
		}
		switch {
		case perr != nil:
			serr = perr
			fallthrough
		case serr != nil:
			if pidfd >= 0 {
				unix.Close(pidfd)
			}
			if !send(SpawnMessage{Error: serr.Error()}) {
				return killAll(children)
			}
		default:
			children[pidfd] = pid
			if !send(SpawnMessage{Pid: pid, SpareNet: spare}, pidfd) {
				return killAll(children)
			}
		}
		nets.fill() // the next spare, now that the stage is on its way
	}
}

// ReceivedFds returns the descriptors in a message's SCM_RIGHTS control
// data.
func ReceivedFds(oob []byte) ([]int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	for _, m := range msgs {
		rights, err := unix.ParseUnixRights(&m)
		if err != nil {
			return fds, err
		}
		fds = append(fds, rights...)
	}
	return fds, nil
}

// spawnOne starts one stage; the returned pidfd is -1 on failure. spare
// reports that the stage got a network namespace made ahead.
func spawnOne(msg []byte, fds []int, nets *netSpares) (pid, pidfd int, spare bool, err error) {
	pidfd = -1
	req, err := DecodeSpawnRequest(msg)
	if err != nil {
		return 0, -1, false, fmt.Errorf("spawn request: %w", err)
	}
	cgroupFd := -1
	if req.IntoCgroup && len(fds) > 0 {
		cgroupFd, fds = fds[len(fds)-1], fds[:len(fds)-1]
	}
	if len(fds) < FdFirst { // stdin, stdout and stderr
		return 0, -1, false, fmt.Errorf("spawn request: %d descriptors, want at least %d", len(fds), FdFirst)
	}
	flags := req.Cloneflags
	if req.SpareNet && flags&unix.CLONE_NEWNET != 0 && nets.enter() {
		// This thread is in the spare until the fork is done; the child
		// is born in it.
		flags &^= unix.CLONE_NEWNET
		spare = true
		defer nets.leave()
	}
	files := make([]uintptr, len(fds))
	for i, fd := range fds {
		files[i] = uintptr(fd)
	}
	m := []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(req.UID), Size: 1}}
	pid, err = syscall.ForkExec(req.Path, req.Args, &syscall.ProcAttr{
		Dir:   req.Dir,
		Env:   req.Env,
		Files: files,
		Sys: &syscall.SysProcAttr{
			Cloneflags:  flags,
			UidMappings: m,
			GidMappings: m,
			// Become the mapped root, so the stage holds capabilities in
			// its own user namespace (and none outside it).
			Credential:  &syscall.Credential{Uid: 0, Gid: 0, NoSetGroups: true},
			Pdeathsig:   syscall.SIGKILL,
			PidFD:       &pidfd,
			UseCgroupFD: cgroupFd >= 0,
			CgroupFD:    cgroupFd,
		},
	})
	if err != nil {
		return 0, -1, false, fmt.Errorf("starting stage: %w", err)
	}
	return pid, pidfd, spare, nil
}

// killAll kills and reaps the stages still running and returns the
// spawner's exit code.
func killAll(children map[int]int) int {
	for fd, pid := range children {
		_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(pid, &ws, 0, nil)
		unix.Close(fd)
	}
	return 0
}

// trimMounts gives the spawner a mount namespace of its own holding only
// the mounts a stage reads from before it pivots (see stageMount): a
// stage's new mount namespace starts as a copy of this one, and its pivot
// detaches that copy, so every other mount on the host (/sys and its
// cgroup hierarchies, /run, /tmp, a container runtime's binds, …) would
// cost each start twice. Host mount events still propagate in (a slave).
// Without the privilege to make a mount namespace it changes nothing.
func trimMounts() {
	if unix.Unshare(unix.CLONE_NEWNS) != nil {
		return
	}
	if unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, "") != nil {
		return
	}
	points, err := MountPoints("self")
	if err != nil {
		return
	}
	// Shallowest first; a detach takes everything beneath it along, and
	// is repeated for mounts stacked on one point.
	sort.Slice(points, func(a, b int) bool { return strings.Count(points[a], "/") < strings.Count(points[b], "/") })
	var gone []string
	for _, p := range points {
		if stageMount(p) || slices.ContainsFunc(gone, func(g string) bool { return p == g || strings.HasPrefix(p, g+"/") }) {
			continue
		}
		for range 64 {
			if unix.Unmount(p, unix.MNT_DETACH) != nil {
				break
			}
		}
		gone = append(gone, p)
	}
}

// stageMount reports whether a stage may need the mount at p: the root,
// /proc (a new one is mounted from it), /dev (the device nodes are bound
// from it), and what is at or beneath /usr, /etc and the top-level
// directories that are links into /usr on a merged-/usr host.
func stageMount(p string) bool {
	switch p {
	case "/", "/proc", "/dev":
		return true
	}
	for _, dir := range append([]string{"usr", "etc"}, usrLinks...) {
		if p == "/"+dir || strings.HasPrefix(p, "/"+dir+"/") {
			return true
		}
	}
	return false
}
