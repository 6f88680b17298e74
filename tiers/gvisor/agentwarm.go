package gvisor

import (
	"encoding/json"
	"io"
	"runtime"
	"syscall"
	"unsafe"

	"github.com/airlock-sandbox/airlock/tiers/internal/frame"
)

// prewarmAddressSpace leaves one spare address space in the Sentry for the
// job's program. Under systrap every address space is a host stub process,
// and execve gives the program a new one: created on demand, that costs
// the first exec of a fresh sandbox about 1.5 ms (docs/gvisor.md,
// Benchmarks), while one released by an exited process is reused. So the
// agent, before it reports ready, forks a copy of itself that exits at
// once; its stub process goes back to the Sentry's pool and the job's exec
// takes it. Nothing runs in the child: it makes one system call, exit.
//
// Best effort: a failure only leaves the first exec as slow as before.
func prewarmAddressSpace() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// With every signal blocked no handler can run in the child, which is a
	// copy of a multithreaded Go process with only this thread in it.
	all := ^uint64(0)
	var old uint64
	if _, _, e := syscall.RawSyscall6(syscall.SYS_RT_SIGPROCMASK, 2 /* SIG_SETMASK */, uintptr(unsafe.Pointer(&all)), uintptr(unsafe.Pointer(&old)), 8, 0, 0); e != 0 {
		return
	}
	pid, errno := forkExit()
	_, _, _ = syscall.RawSyscall6(syscall.SYS_RT_SIGPROCMASK, 2, uintptr(unsafe.Pointer(&old)), 0, 8, 0, 0)
	if errno != 0 {
		return
	}
	for {
		var ws syscall.WaitStatus
		if _, err := syscall.Wait4(int(pid), &ws, 0, nil); err != syscall.EINTR {
			return
		}
	}
}

// forkExit forks (a copy that shares no memory with the agent: a new
// address space) and makes the child exit at once. It returns the child's
// PID in the parent. nosplit: the child must not grow its stack or enter
// the scheduler before it exits.
//
//go:nosplit
//go:norace
func forkExit() (uintptr, syscall.Errno) {
	r, _, e := syscall.RawSyscall6(syscall.SYS_CLONE, uintptr(syscall.SIGCHLD), 0, 0, 0, 0, 0)
	if e == 0 && r == 0 {
		syscall.RawSyscall(syscall.SYS_EXIT_GROUP, 0, 0, 0)
	}
	return r, e
}

// prewarmCodecs decodes a sample job frame and encodes an exit frame once,
// so that encoding/json has built its codecs for both types (reflection
// work, and code paged in through the Sentry) before a job waits on them.
func prewarmCodecs() {
	var j agentJob
	_ = json.Unmarshal([]byte(`{"argv":["true"],"env":["A=b"],"files":{"f":"x"},"stdin":"x","uid":1,"nofile":1,"output":1}`), &j)
	_ = frame.WriteJSON(io.Discard, frame.Exit, agentExit{Code: 1, SpawnUS: 1, ExitUS: 1})
}
