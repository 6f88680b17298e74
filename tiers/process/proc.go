package process

import (
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"

	"github.com/airlock-sandbox/airlock/internal/deathsig"
	"github.com/airlock-sandbox/airlock/tiers/process/internal/stage"
	"golang.org/x/sys/unix"
)

// proc is a process a tier starts in its own namespaces — a container's
// stage, a guarded worker — started by the tier's spawner (then it has a
// pidfd: the spawner is its parent) or from this process (cmd). waitCh
// closes when it has exited.
type proc struct {
	pid     int
	pidfd   *os.File
	cmd     *exec.Cmd
	ws      syscall.WaitStatus // valid when wsOK
	wsOK    bool
	waitErr error // why its end is not known, or how it failed
	waitCh  chan struct{}
	exitOne sync.Once
	endMu   sync.Mutex
	onExit  func() // run by exited; set by whenExited
}

func newProc() proc { return proc{waitCh: make(chan struct{})} }

// startProc starts cmd for uid (its sandbox root's host id) through the
// spawner in h when one can be had and the descriptors fit in one
// message, else from this process. cmd's Stdin, Stdout and Stderr must be
// *os.File, and its settings those the spawner applies (stage.SpawnRequest:
// a new user namespace mapping root to uid, and the given clone flags).
// spareNet allows a network namespace made ahead in place of a new one,
// for a process that configures nothing in it. cgDir, if not nil, is the
// cgroup v2 directory the process is born in (cmd.SysProcAttr's
// CgroupFD names it for a start from here).
func (p *proc) startProc(h *spawners, bin *stageBinary, cmd *exec.Cmd, uid uint32, spareNet bool, cgDir *os.File) error {
	files := append([]*os.File{asFile(cmd.Stdin), asFile(cmd.Stdout), asFile(cmd.Stderr)}, cmd.ExtraFiles...)
	if cgDir != nil {
		files = append(files, cgDir) // last: see stage.SpawnRequest.IntoCgroup
	}
	if len(files) <= spawnMaxFiles {
		if sp, err := h.get(bin); err == nil {
			err := sp.spawn(p, stage.SpawnRequest{
				Path: cmd.Path, Args: cmd.Args, Env: cmd.Env, Dir: cmd.Dir,
				Cloneflags: cmd.SysProcAttr.Cloneflags, UID: uid, SpareNet: spareNet,
				IntoCgroup: cgDir != nil,
			}, files)
			if err == nil || sp.alive() {
				return err
			}
			// The spawner died under this request (and whatever it had
			// started with it): start from here instead.
			p.pid, p.pidfd = 0, nil
		}
	}
	return p.startHere(cmd)
}

// startHere starts cmd from this process.
func (p *proc) startHere(cmd *exec.Cmd) error {
	p.cmd = cmd
	// Its parent-death signal must not fire when some other goroutine
	// retires the thread that forked it (see package deathsig).
	wait, err := deathsig.Start(cmd)
	if err != nil {
		return err
	}
	p.pid = cmd.Process.Pid
	go func() {
		err := wait()
		var ws syscall.WaitStatus
		ok := cmd.ProcessState != nil
		if ok {
			ws, _ = cmd.ProcessState.Sys().(syscall.WaitStatus)
		}
		p.exited(ws, ok, err)
	}()
	return nil
}

// cloneInto sets cmd to clone its process straight into cg (v2's
// CLONE_INTO_CGROUP) and returns cg's directory, to be passed to
// startProc; or, on v1 or without the directory, leaves cmd as it is and
// returns nil, and the caller moves the process in.
func cloneInto(cmd *exec.Cmd, cg jobCgroup) *os.File {
	dir := cg.dir()
	if dir != nil {
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = int(dir.Fd())
	}
	return dir
}

func asFile(v any) *os.File {
	f, _ := v.(*os.File)
	return f
}

// started records the process the spawner started.
func (p *proc) started(pid int, pidfd *os.File) { p.pid, p.pidfd = pid, pidfd }

func (p *proc) pidFile() *os.File { return p.pidfd }

// exited records the end (once) and closes waitCh: the wait status if
// known (ok), and err, why not or how it failed.
func (p *proc) exited(ws syscall.WaitStatus, ok bool, err error) {
	p.exitOne.Do(func() {
		p.ws, p.wsOK, p.waitErr = ws, ok, err
		if err == nil && ok && (ws.Signaled() || ws.ExitStatus() != 0) {
			p.waitErr = fmt.Errorf("stage %s", describeWait(ws))
		}
		p.endMu.Lock()
		close(p.waitCh)
		f := p.onExit
		p.endMu.Unlock()
		if f != nil {
			f()
		}
	})
}

// whenExited runs f once the process has exited: right away when it has,
// else on the goroutine that learns of its end (so f must not block). It
// lets a caller hand clean-up to a goroutine that wakes for the end
// anyway, instead of starting one.
func (p *proc) whenExited(f func()) {
	p.endMu.Lock()
	if !exitedCh(p.waitCh) {
		p.onExit = f
		p.endMu.Unlock()
		return
	}
	p.endMu.Unlock()
	f()
}

func describeWait(ws syscall.WaitStatus) string {
	if ws.Signaled() {
		return "killed by signal " + ws.Signal().String()
	}
	return fmt.Sprintf("exited with status %d", ws.ExitStatus())
}

// signalKill SIGKILLs the process (through its pidfd when it has one).
func (p *proc) signalKill() {
	switch {
	case p.pidfd != nil:
		_ = unix.PidfdSendSignal(int(p.pidfd.Fd()), unix.SIGKILL, nil, 0)
	case p.cmd != nil && p.cmd.Process != nil:
		_ = p.cmd.Process.Kill()
	}
}

// killIfRunning sends SIGKILL unless the process's end has been recorded
// (holding endMu keeps a clean-up waiting for that end from closing the
// pidfd meanwhile).
func (p *proc) killIfRunning() {
	p.endMu.Lock()
	defer p.endMu.Unlock()
	if !exitedCh(p.waitCh) {
		p.signalKill()
	}
}

// release closes the pidfd once the process has exited.
func (p *proc) release() {
	if p.pidfd != nil {
		p.pidfd.Close()
		p.pidfd = nil
	}
}
