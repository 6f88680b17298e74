package stage

import (
	"encoding/binary"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// A level-2 program runs as the same uid as the stage that supervises it,
// in the host's PID namespace, so a signal could end the stage and the run
// would be reported killed. The stage therefore forks it from a thread of
// its own, confined there (startConfined): the stage's other threads, the
// main one whose id is the process's among them, stay outside the job's
// Landlock domain, and its signal scope (Landlock ABI 6, Linux 6.12) keeps
// the program from signalling any of them. A second seccomp filter on that
// thread, which the program inherits, refuses the calls that name the
// stage by number (guardFilter): the thread itself, which shares the
// program's domain, and, where Landlock cannot scope signals, the direct
// ways to the rest of the stage.

// startConfined returns a start function for supervise that moves a new
// thread into the job's cgroup (through cgroupFds, v1 "tasks" files the
// stage's main thread has joined through already; it closes them), confines it
// (Landlock, the guard, then the job's seccomp filter), forks the program
// from it, and keeps the thread until the returned release is called: the
// program's parent-death signal follows the thread that forked it.
func startConfined(rules []llRule, prog filter, cgroupFds []int) startFunc {
	return func(path string, argv []string, attr *syscall.ProcAttr) (int, func(), error) {
		type started struct {
			pid int
			err error
		}
		res := make(chan started)
		done := make(chan struct{})
		pid, pgid := unix.Getpid(), unix.Getpgrp()
		go func() {
			// Never unlocked: the confined thread ends with this goroutine.
			runtime.LockOSThread()
			if err := joinCgroup(cgroupFds); err != nil {
				res <- started{err: err}
				return
			}
			guard := guardFilter(pid, unix.Gettid(), pgid)
			if err := confine(rules, guard, prog); err != nil {
				res <- started{err: err}
				return
			}
			p, err := syscall.ForkExec(path, argv, attr)
			res <- started{p, err}
			<-done
		}()
		r := <-res
		return r.pid, func() { close(done) }, r.err
	}
}

// guardFilter is a seccomp program that refuses with EPERM signals sent to
// the stage process pid (kill, tgkill, rt_sigqueueinfo, rt_tgsigqueueinfo
// and a pidfd opened for it), to its thread tid, to its process group
// pgid and to every process (kill -1), and a change to its resource limits.
// A call that names any other process is left to the job's own filter.
func guardFilter(pid, tid, pgid int) filter {
	self := []uint32{uint32(pid), uint32(tid)}
	checks := []struct {
		nr   uint32
		vals []uint32 // refused values of the first argument
	}{
		{unix.SYS_KILL, append(self, uint32(-pgid), uint32(0xffffffff))},
		{unix.SYS_TKILL, self},
		{unix.SYS_TGKILL, self[:1]}, // every thread of the stage has its tgid
		{unix.SYS_RT_SIGQUEUEINFO, self},
		{unix.SYS_RT_TGSIGQUEUEINFO, self[:1]},
		{unix.SYS_PIDFD_OPEN, self},
		{unix.SYS_PRLIMIT64, self},
	}
	const (
		ldAbs = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq   = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		ret   = unix.BPF_RET | unix.BPF_K
	)
	// pid_t arguments are 32 bits: compare the low word of the first
	// argument (seccomp_data.args[0] is at offset 16).
	arg0 := uint32(16)
	if binary.NativeEndian.Uint16([]byte{0, 1}) == 1 {
		arg0 += 4
	}
	// Layout: the number, one jump per call, allow; then per call its
	// argument, one jump per value, allow; then the refusal.
	head := 1 + len(checks) + 1
	var f filter
	f = append(f, unix.SockFilter{Code: ldAbs, K: 0})
	at := head
	for i, c := range checks {
		f = append(f, unix.SockFilter{Code: jeq, K: c.nr, Jt: uint8(at - (1 + i) - 1)})
		at += 1 + len(c.vals) + 1
	}
	deny := at
	f = append(f, unix.SockFilter{Code: ret, K: unix.SECCOMP_RET_ALLOW})
	for _, c := range checks {
		f = append(f, unix.SockFilter{Code: ldAbs, K: arg0})
		for _, v := range c.vals {
			f = append(f, unix.SockFilter{Code: jeq, K: v, Jt: uint8(deny - len(f) - 1)})
		}
		f = append(f, unix.SockFilter{Code: ret, K: unix.SECCOMP_RET_ALLOW})
	}
	return append(f, unix.SockFilter{Code: ret, K: unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)})
}
