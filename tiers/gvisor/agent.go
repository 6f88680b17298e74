package gvisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/egresswire"
	"github.com/airlock-sandbox/airlock/role"
	"github.com/airlock-sandbox/airlock/tiers/internal/execguard"
	"github.com/airlock-sandbox/airlock/tiers/internal/frame"
)

// The agent is the running executable re-executed inside a sandbox in the
// agent role (see Roles): the CLI, a server, or a test binary all carry
// it. The host's executable is bind-mounted read-only into the sandbox,
// and the host's library directories are mounted too, so a dynamically
// linked executable works. Keeping the agent in the same binary means it
// can never be out of step with the host side of the protocol.
const (
	agentRole = "gvisor-agent"
	agentArg  = "airlock-gvisor-agent"
	modeOnce  = "once"    // run one job, then exit (pooled sandboxes)
	modeServe = "session" // run jobs until the host hangs up (sessions)
)

// Roles are the roles this tier starts the running binary in: the agent
// inside each sandbox. A program that uses the tier passes them to
// role.Run first thing in main.
func Roles() []role.Role {
	return []role.Role{{Name: agentRole, Main: func() int {
		if len(os.Args) != 3 || os.Args[1] != agentArg {
			fmt.Fprintln(os.Stderr, "airlock agent: started without its arguments")
			return 2
		}
		return agentMain(os.Args[2])
	}}, {Name: execguard.RoleName, Main: execguard.Main}}
}

// agentMain connects to the host's socket and serves jobs.
func agentMain(mode string) int {
	// Before reporting ready (connecting), so that the claim pays nothing.
	prewarmAddressSpace()
	prewarmCodecs()
	var conn net.Conn
	var err error
	for i := 0; i < 100; i++ {
		if conn, err = net.Dial("unix", agentSock); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "airlock agent: %v\n", err)
		return 2
	}
	defer conn.Close()
	streams := [2]int{-1, -1}
	if mode == modeOnce {
		for i, tag := range []byte{streamIn, streamOut} {
			if streams[i], err = dialStream(tag); err != nil {
				fmt.Fprintf(os.Stderr, "airlock agent: %v\n", err)
				return 2
			}
		}
	}
	// One reader takes every frame the host sends: a Kill is acted on at
	// once, while a job runs; a Job (or the end) goes to the loop below.
	type read struct {
		typ     frame.Type
		payload []byte
		err     error
	}
	reads := make(chan read)
	go func() {
		for {
			typ, payload, err := frame.Read(conn)
			if err == nil && typ == frame.Kill {
				running.kill()
				continue
			}
			reads <- read{typ, payload, err}
			if err != nil {
				return
			}
		}
	}()
	for {
		rd := <-reads
		typ, payload, err := rd.typ, rd.payload, rd.err
		if errors.Is(err, io.EOF) {
			return 0
		}
		if err != nil || typ != frame.Job {
			fmt.Fprintf(os.Stderr, "airlock agent: bad job frame: %v\n", err)
			return 2
		}
		received := time.Now()
		var job agentJob
		var exit agentExit
		if err := json.Unmarshal(payload, &job); err != nil {
			exit = agentExit{Code: -1, Error: "decoding job: " + err.Error()}
		} else {
			running.begin()
			exit = runAgentJob(conn, &job, received, streams)
			running.end()
			if len(job.Collect) > 0 && exit.Error == "" {
				sendCollected(conn, job.Collect) // also when the program could not start
			}
		}
		if err := frame.WriteJSON(conn, frame.Exit, exit); err != nil || mode == modeOnce {
			return 0
		}
	}
}

// running is the agent's job in progress, for the host's Kill frame: a
// run the host stopped (a limit, a cancellation) ends with its processes
// killed while the sandbox, and a session's scratch, stay.
var running jobState

type jobState struct {
	mu     sync.Mutex
	active bool // a job is between its Job frame and its Exit
	killed bool // the host asked for the job's processes to be killed
}

func (j *jobState) begin() {
	j.mu.Lock()
	j.active, j.killed = true, false
	j.mu.Unlock()
}

func (j *jobState) end() {
	j.mu.Lock()
	j.active = false
	j.mu.Unlock()
}

// kill kills every process but the agent (kill(-1) from PID 1), when a
// job is running; a Kill that arrives after the job ended is late and
// ignored.
func (j *jobState) kill() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.active {
		j.killed = true
		_ = syscall.Kill(-1, syscall.SIGKILL)
	}
}

// started is called once the job's program is forked: a Kill that came
// before (while files were placed) kills it now.
func (j *jobState) started() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.killed {
		_ = syscall.Kill(-1, syscall.SIGKILL)
	}
}

// runAgentJob runs one job as PID 1's child: places its files, starts it
// under the job's user and file limit, forwards its output, reaps every
// process (PID 1 inherits orphans), and when the job's main process exits
// kills whatever it left running.
func runAgentJob(conn net.Conn, job *agentJob, received time.Time, streams [2]int) agentExit {
	if job.Egress {
		f, err := egresswire.StartForwarder(sandboxEgressDir)
		if err != nil {
			return agentExit{Code: -1, Error: err.Error()}
		}
		defer f.Close()
	}
	if err := writeFiles(scratchDir, job.Files, job.UID); errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || errors.Is(err, syscall.EFBIG) {
		return agentExit{Code: -1, FilesFull: err.Error()}
	} else if err != nil {
		return agentExit{Code: -1, Error: err.Error()}
	}
	for _, g := range job.Copies {
		if err := ownCopy(g, job.UID); errors.Is(err, syscall.ENOSPC) {
			return agentExit{Code: -1, CopyFull: fmt.Sprintf("the copy at %s does not fit in the scratch", g)}
		} else if err != nil {
			return agentExit{Code: -1, Error: fmt.Sprintf("copy at %s: %v", g, err)}
		}
	}
	prog, err := lookPath(job.Argv[0], job.Env)
	if err != nil {
		return startFailed(conn, job.Argv[0], err)
	}
	// The job's ends of its pipes are plain blocking descriptors (never
	// registered with the agent's poller); a job without stdin gets a pipe
	// whose other end is already closed: it reads EOF.
	child := [3]int{-1, -1, -1}
	var inW, outR, errR *os.File
	if job.Attach {
		if streams[0] < 0 {
			return agentExit{Code: -1, Error: "no streams for an attached job"}
		}
		child[0], child[1] = streams[0], streams[1] // closed below once the program has them
	} else {
		child[0], inW, err = jobPipe(false, job.Stdin != "", job.UID)
		if err == nil {
			child[1], outR, err = jobPipe(true, true, job.UID)
		}
	}
	if err == nil {
		child[2], errR, err = jobPipe(true, true, job.UID)
	}
	if err != nil {
		for _, fd := range child {
			if fd >= 0 {
				syscall.Close(fd)
			}
		}
		for _, f := range []*os.File{inW, outR, errR} {
			if f != nil {
				f.Close()
			}
		}
		return agentExit{Code: -1, Error: err.Error()}
	}
	var old syscall.Rlimit
	_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old)
	if job.NoFile > 0 {
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: job.NoFile, Max: job.NoFile})
	}
	attr := &syscall.ProcAttr{
		Dir:   scratchDir,
		Env:   job.Env,
		Files: []uintptr{uintptr(child[0]), uintptr(child[1]), uintptr(child[2])},
		Sys: &syscall.SysProcAttr{
			Setsid:     true,
			Credential: &syscall.Credential{Uid: uint32(job.UID), Gid: uint32(job.UID)},
		},
	}
	path, argv := prog, job.Argv
	var guardW *os.File
	if !job.Spawn {
		// The guard, not the job, is what starts; it reads the job from
		// descriptor 3.
		var guardR *os.File
		guardR, guardW, err = os.Pipe()
		if err == nil && len(job.Guard) == 0 {
			err = errors.New("no exec guard")
		}
		if err != nil {
			return agentExit{Code: -1, Error: fmt.Sprintf("exec guard: %v", err)}
		}
		defer guardR.Close()
		attr.Files = append(attr.Files, guardR.Fd())
		attr.Env = []string{role.Env + "=" + execguard.RoleName}
		path, argv = job.Guard[0], append(append([]string(nil), job.Guard...), execguard.Arg)
	}
	pid, err := syscall.ForkExec(path, argv, attr)
	_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old)
	if err == nil {
		running.started()
	}
	for _, fd := range child {
		syscall.Close(fd)
	}
	if guardW != nil {
		if err == nil {
			go writeGuard(guardW, prog, job)
		} else {
			guardW.Close()
		}
	}
	if err != nil {
		for _, f := range []*os.File{inW, outR, errR} {
			if f != nil {
				f.Close()
			}
		}
		return startFailed(conn, job.Argv[0], err)
	}
	spawned := time.Since(received).Microseconds()
	if inW != nil {
		go func() {
			_, _ = io.WriteString(inW, string(job.Stdin))
			inW.Close()
		}()
	}
	out := frame.NewOutput(conn, job.Output+1)
	var copies sync.WaitGroup
	for _, s := range []struct {
		r   *os.File
		typ frame.Type
	}{{outR, frame.Stdout}, {errR, frame.Stderr}} {
		if s.r == nil { // an attached job's stdout is its stream
			continue
		}
		copies.Add(1)
		go func() {
			defer copies.Done()
			defer s.r.Close()
			out.Copy(s.r, s.typ)
		}()
	}
	code := reap(pid)
	exited := time.Since(received).Microseconds()
	// Whatever the job left behind dies with it: kill(-1) from PID 1 signals
	// every other process in the sandbox.
	_ = syscall.Kill(-1, syscall.SIGKILL)
	for reapAll() {
	}
	drained := make(chan struct{})
	go func() { copies.Wait(); close(drained) }()
	out.Drain(drained, 2*time.Second)
	return agentExit{Code: code, SpawnUS: spawned, ExitUS: exited}
}

// dialStream opens one of the sandbox's streams: a blocking, close-on-exec
// connection to the host's socket, announced by its tag. An attached
// program gets it as its stdin or stdout; the agent never reads or writes
// it, so it stays out of the agent's poller.
func dialStream(tag byte) (int, error) {
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, os.NewSyscallError("socket", err)
	}
	if err := syscall.Connect(fd, &syscall.SockaddrUnix{Name: agentSock}); err != nil {
		syscall.Close(fd)
		return -1, os.NewSyscallError("connect", err)
	}
	for {
		_, err := syscall.Write(fd, []byte{tag})
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			syscall.Close(fd)
			return -1, os.NewSyscallError("write", err)
		}
		return fd, nil
	}
}

// startFailed reports a program that could not be started as every tier
// does (execguard.StartFailure): one line naming it, status 127 or 126.
func startFailed(conn net.Conn, name string, err error) agentExit {
	code, line, ok := execguard.StartFailure(name, err)
	if !ok {
		code, line = 126, fmt.Sprintf("airlock: starting %q: %v", name, err)
	}
	msg := line + "\n"
	_ = frame.Write(conn, frame.Stderr, []byte(msg[:min(len(msg), frame.MaxChunk)]))
	return agentExit{Code: code}
}

// writeGuard hands the guard the job to execute, then closes the pipe
// (the guard reads to its end).
func writeGuard(w *os.File, prog string, job *agentJob) {
	defer w.Close()
	data, err := json.Marshal(execguard.Config{Path: prog, Argv: job.Argv, Env: job.Env})
	if err == nil {
		_, _ = w.Write(data)
	}
}

// jobPipe makes a pipe for one of the job's standard streams and returns
// the job's end, a blocking close-on-exec descriptor (ForkExec dups it into
// place), and the agent's end, a non-blocking *os.File served by the
// poller. childWrites says which way data flows. With keep false (stdin
// with nothing to send) the agent's end is closed at once and nil. The
// pipe is the job's user's (uid), as on every tier, so that the program
// may open its streams again by name (/dev/stdout, /proc/self/fd/1): one
// the agent made is its own and mode 0600.
func jobPipe(childWrites, keep bool, uid int) (int, *os.File, error) {
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC); err != nil {
		return -1, nil, os.NewSyscallError("pipe2", err)
	}
	if err := syscall.Fchown(p[0], uid, uid); err != nil {
		syscall.Close(p[0])
		syscall.Close(p[1])
		return -1, nil, os.NewSyscallError("fchown", err)
	}
	child, mine := p[0], p[1]
	if childWrites {
		child, mine = p[1], p[0]
	}
	if !keep {
		syscall.Close(mine)
		return child, nil, nil
	}
	if err := syscall.SetNonblock(mine, true); err != nil {
		syscall.Close(child)
		syscall.Close(mine)
		return -1, nil, os.NewSyscallError("fcntl", err)
	}
	return child, os.NewFile(uintptr(mine), "|job"), nil
}

// reap waits for pid, reaping any orphan that exits first, and returns its
// exit code (128+signal when killed by a signal, as a shell reports it).
func reap(pid int) int {
	for {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return -1
		}
		if got == pid {
			if ws.Signaled() {
				return 128 + int(ws.Signal())
			}
			return ws.ExitStatus()
		}
	}
}

// reapAll reaps one exited process; false once none are left.
func reapAll() bool {
	var ws syscall.WaitStatus
	_, err := syscall.Wait4(-1, &ws, 0, nil)
	return err == nil || errors.Is(err, syscall.EINTR)
}

// lookPath resolves a program name against the job's PATH (the default
// one if the job sets none).
func lookPath(name string, env []string) (string, error) {
	path := defaultPATH
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	return execguard.LookPath(name, path)
}
