package process

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/tiers/process/internal/stage"
	"golang.org/x/sys/unix"
)

// spawner is the parent's side of the stage package's spawner: a small
// process that starts containers, so that the cost of starting one does
// not grow with this process's memory (see stage/spawn.go). One per tier,
// started with the first container; if it dies, the next start makes a
// new one.
type spawner struct {
	conn *net.UnixConn
	proc *os.Process
	gone chan struct{} // closed when the spawner has exited and been reaped

	mu      sync.Mutex // one request at a time
	replies chan spawnReply

	regMu   sync.Mutex
	pending *proc         // whose request is in flight
	live    map[int]*proc // started processes by pid, until their exit
	dead    bool
	deadErr error

	spares atomic.Int64 // stages started in a network namespace made ahead
}

type spawnReply struct {
	pid int
	err error
}

// spawnTimeout bounds one request: the spawner only forks.
const spawnTimeout = 10 * time.Second

// startSpawner starts a spawner from bin.
func startSpawner(bin *stageBinary) (*spawner, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("spawner socket: %w", err)
	}
	parentF, childF := os.NewFile(uintptr(fds[0]), "spawner"), os.NewFile(uintptr(fds[1]), "spawner-child")
	defer childF.Close()
	c, err := net.FileConn(parentF)
	parentF.Close()
	if err != nil {
		childF.Close()
		return nil, fmt.Errorf("spawner socket: %w", err)
	}
	s := &spawner{conn: c.(*net.UnixConn), gone: make(chan struct{}), replies: make(chan spawnReply, 1), live: map[int]*proc{}}
	// The spawner's parent-death signal follows the thread that started
	// it: a goroutine locked to its thread starts it and waits for it, so
	// the thread lives exactly as long as the spawner.
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		fds := newFdTable(stage.FdSpawnerExe + 1)
		fds.set(stage.FdSpawner, childF)
		fds.set(stage.FdSpawnerExe, bin.file)
		cmd := &exec.Cmd{
			Path:       stage.FdPath(stage.FdSpawnerExe),
			Args:       []string{"airlock-spawner"},
			Env:        []string{stage.Env + "=" + stage.Spawner, "GOMAXPROCS=1"},
			Dir:        "/",
			ExtraFiles: fds.files,
			SysProcAttr: &syscall.SysProcAttr{
				Pdeathsig: syscall.SIGKILL,
				Setpgid:   true, // not in the caller's terminal signals
			},
		}
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		s.proc = cmd.Process
		started <- nil
		_ = cmd.Wait()
		close(s.gone)
		// Unlocked never: the thread ends with this goroutine.
	}()
	if err := <-started; err != nil {
		s.conn.Close()
		return nil, fmt.Errorf("starting the spawner: %w", err)
	}
	go s.demux()
	return s, nil
}

// demux reads the spawner's messages: the reply to the request in flight
// (registering the new stage before anything else is read, so its exit
// finds it), and stages' exits. When the spawner is gone every stage it
// started is gone too (their parent-death signal): they are all reported
// exited.
func (s *spawner) demux() {
	buf := make([]byte, 64<<10)
	oob := make([]byte, unix.CmsgSpace(4))
	var err error
	for {
		var n, oobn int
		n, oobn, _, _, err = s.conn.ReadMsgUnix(buf, oob)
		if err != nil || n == 0 {
			if err == nil {
				err = errors.New("spawner closed its socket")
			}
			break
		}
		var m stage.SpawnMessage
		if m, err = stage.DecodeSpawnMessage(buf[:n]); err != nil {
			err = fmt.Errorf("spawner message: %w", err)
			break
		}
		switch {
		case m.Exited != 0:
			s.regMu.Lock()
			sb := s.live[m.Exited]
			delete(s.live, m.Exited)
			s.regMu.Unlock()
			if sb != nil {
				sb.exited(syscall.WaitStatus(m.Status), true, nil)
			}
		case m.Error != "":
			s.regMu.Lock()
			s.pending = nil
			s.regMu.Unlock()
			s.replies <- spawnReply{err: errors.New(m.Error)}
		default:
			pidfd, perr := oneFd(oob[:oobn])
			s.regMu.Lock()
			sb := s.pending
			s.pending = nil
			if sb != nil && perr == nil {
				sb.started(m.Pid, pidfd)
				if m.SpareNet {
					s.spares.Add(1)
				}
				s.live[m.Pid] = sb
			}
			s.regMu.Unlock()
			if perr != nil {
				perr = fmt.Errorf("spawner reply: %w", perr)
			}
			s.replies <- spawnReply{pid: m.Pid, err: perr}
		}
	}
	s.regMu.Lock()
	s.dead, s.deadErr = true, fmt.Errorf("spawner: %w", err)
	live := s.live
	s.live = map[int]*proc{}
	s.regMu.Unlock()
	// Their parent-death signal kills them: each is reported once its
	// pidfd says it has exited (the kernel's init reaps them).
	for _, sb := range live {
		fd := int(sb.pidFile().Fd())
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
			if n, err := unix.Poll(pfd, 100); n > 0 || (err != nil && !errors.Is(err, unix.EINTR)) {
				break
			}
			_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
		}
		sb.exited(0, false, s.deadErr)
	}
	close(s.replies)
}

func oneFd(oob []byte) (*os.File, error) {
	fds, err := stage.ReceivedFds(oob)
	if err == nil && len(fds) != 1 {
		err = fmt.Errorf("%d descriptors, want a pidfd", len(fds))
	}
	if err != nil {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, err
	}
	return os.NewFile(uintptr(fds[0]), "pidfd"), nil
}

// alive reports whether the spawner can take requests.
func (s *spawner) alive() bool {
	s.regMu.Lock()
	defer s.regMu.Unlock()
	return !s.dead
}

// spawn starts sb's process with the given descriptors (stdin, stdout,
// stderr, then from 3 on; nil entries become /dev/null). On success sb
// has been told its pid and pidfd, and is told of the exit later.
func (s *spawner) spawn(sb *proc, req stage.SpawnRequest, files []*os.File) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	fds := make([]int, len(files))
	for i, f := range files {
		if f == nil {
			null, err := devNull()
			if err != nil {
				return err
			}
			f = null
		}
		fds[i] = int(f.Fd())
	}
	b := stage.AppendSpawnRequest(nil, &req)
	s.regMu.Lock()
	if s.dead {
		s.regMu.Unlock()
		return s.deadErr
	}
	s.pending = sb
	s.regMu.Unlock()
	_, _, err := s.conn.WriteMsgUnix(b, unix.UnixRights(fds...), nil)
	runtime.KeepAlive(files)
	if err != nil {
		s.regMu.Lock()
		s.pending = nil
		s.regMu.Unlock()
		return fmt.Errorf("spawner: %w", err)
	}
	select {
	case r, ok := <-s.replies:
		if !ok {
			return errors.New("spawner exited")
		}
		return r.err
	case <-time.After(spawnTimeout):
		s.conn.Close() // the demux ends and reports every stage gone
		return errors.New("spawner did not answer")
	}
}

// close stops the spawner (it kills whatever it still runs) and waits for
// it.
func (s *spawner) close() {
	s.conn.Close()
	select {
	case <-s.gone:
	case <-time.After(10 * time.Second):
		if s.proc != nil {
			_ = s.proc.Kill()
		}
		<-s.gone
	}
}

var (
	devNullOnce sync.Once
	devNullFile *os.File
	devNullErr  error
)

func devNull() (*os.File, error) {
	devNullOnce.Do(func() { devNullFile, devNullErr = os.Open(os.DevNull) })
	return devNullFile, devNullErr
}

// spawners holds a tier's spawner: started with the first process it
// starts, replaced when it dies, stopped by close.
type spawners struct {
	mu     sync.Mutex
	sp     *spawner
	closed bool
	off    bool // withDirectStarts: start everything from this process
}

// get returns the running spawner, starting one from bin if there is none
// (or the last one died).
func (h *spawners) get(bin *stageBinary) (*spawner, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.closed:
		return nil, errors.New("tier closed")
	case h.off:
		return nil, errors.New("spawner off")
	case h.sp != nil && h.sp.alive():
		return h.sp, nil
	}
	if h.sp != nil {
		h.sp.close()
	}
	s, err := startSpawner(bin)
	if err != nil {
		h.sp = nil
		return nil, err
	}
	h.sp = s
	return s, nil
}

// startAhead starts a spawner from bin in the background if there is none
// (or the last one died), so that its start-up overlaps the rest of the
// first start's preparation (cgroup, /etc template, descriptors); get
// then waits for it. A failure is get's to report, which retries.
func (h *spawners) startAhead(bin *stageBinary) {
	h.mu.Lock()
	need := !h.closed && !h.off && (h.sp == nil || !h.sp.alive())
	h.mu.Unlock()
	if need {
		go func() { _, _ = h.get(bin) }()
	}
}

// current is the spawner in use, if any (tests).
func (h *spawners) current() *spawner {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sp
}

// close stops the spawner (the tier's Close).
func (h *spawners) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	if h.sp != nil {
		h.sp.close()
		h.sp = nil
	}
}
