package stage

import (
	"fmt"
	"unsafe"

	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// The seccomp policy is data: an allowlist of the system calls ordinary
// programs (shells, coreutils, Python, Go binaries) need, a few argument
// checks, and EPERM for everything else. Calls that reach past the sandbox
// — ptrace, mount, namespaces, kexec, bpf, perf, keyrings, io_uring,
// userfaultfd, kernel modules, handle-based opens — are simply absent.

// allowedSyscalls are permitted with any arguments (ioctl too, after the
// terminal-injection checks; socket only through the rules below).
var allowedSyscalls = []string{
	// files and directories
	"read", "write", "open", "openat", "close", "close_range", "stat", "fstat", "lstat", "newfstatat", "statx",
	"statfs", "fstatfs", "lseek", "pread64", "pwrite64", "readv", "writev", "preadv", "pwritev", "preadv2", "pwritev2",
	"access", "faccessat", "faccessat2", "dup", "dup2", "dup3", "pipe", "pipe2", "fcntl", "flock", "fsync",
	"fdatasync", "sync", "syncfs", "sync_file_range", "truncate", "ftruncate", "fallocate", "fadvise64", "readahead",
	"getdents", "getdents64", "getcwd", "chdir", "fchdir", "rename", "renameat", "renameat2", "mkdir", "mkdirat",
	"rmdir", "creat", "link", "linkat", "unlink", "unlinkat", "symlink", "symlinkat", "readlink", "readlinkat",
	"chmod", "fchmod", "fchmodat", "chown", "fchown", "lchown", "fchownat", "umask", "utime", "utimes",
	"utimensat", "futimesat", "sendfile", "splice", "tee", "vmsplice", "copy_file_range", "getxattr", "lgetxattr",
	"fgetxattr", "listxattr", "llistxattr", "flistxattr", "inotify_init", "inotify_init1", "inotify_add_watch",
	"inotify_rm_watch", "memfd_create", "select", "pselect6", "poll", "ppoll", "epoll_create", "epoll_create1",
	"epoll_ctl", "epoll_wait", "epoll_pwait", "epoll_pwait2", "eventfd", "eventfd2", "signalfd", "signalfd4",
	"timerfd_create", "timerfd_settime", "timerfd_gettime",
	// memory
	"brk", "mmap", "munmap", "mremap", "mprotect", "madvise", "msync", "mincore", "mlock", "munlock",
	"membarrier",
	// processes, threads and signals
	"clone", "fork", "vfork", "execve", "execveat", "exit", "exit_group", "wait4", "waitid", "kill", "tgkill",
	"tkill", "getpid", "getppid", "gettid", "getpgid", "setpgid", "getpgrp", "getsid", "setsid", "set_tid_address",
	"set_robust_list", "get_robust_list", "rseq", "futex", "futex_waitv", "arch_prctl", "prctl", "sched_yield",
	"sched_getaffinity", "sched_setaffinity", "sched_getparam", "sched_getscheduler", "sched_get_priority_max",
	"sched_get_priority_min", "sched_getattr", "sched_rr_get_interval", "getpriority", "setpriority",
	"rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigpending", "rt_sigtimedwait", "rt_sigqueueinfo",
	"rt_tgsigqueueinfo", "rt_sigsuspend", "sigaltstack", "pause", "nanosleep", "clock_nanosleep", "alarm",
	"getitimer", "setitimer", "timer_create", "timer_settime", "timer_gettime", "timer_getoverrun", "timer_delete",
	"pidfd_open", "pidfd_send_signal", "restart_syscall",
	// identity and limits (inside the sandbox's own user namespace or as an unprivileged uid)
	"getuid", "geteuid", "getgid", "getegid", "getresuid", "getresgid", "getgroups", "setuid", "setgid",
	"setreuid", "setregid", "setresuid", "setresgid", "setgroups", "setfsuid", "setfsgid", "capget",
	"getrlimit", "setrlimit", "prlimit64", "getrusage", "times", "sysinfo", "uname", "getcpu", "getrandom",
	// time
	"time", "gettimeofday", "clock_gettime", "clock_getres",
	// sockets (socket itself is filtered by family below)
	"connect", "accept", "accept4", "bind", "listen", "sendto", "recvfrom", "sendmsg", "recvmsg", "sendmmsg",
	"recvmmsg", "shutdown", "getsockname", "getpeername", "socketpair", "setsockopt", "getsockopt",
}

// namespaceCloneFlags are the clone(2) flags that would create namespaces.
const namespaceCloneFlags = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
	unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET

// FilterOptions vary the policy between the container and the filter tier.
type FilterOptions struct {
	// inet allows AF_INET/AF_INET6 stream and datagram sockets. Only the
	// container has a network namespace of its own (loopback only), so
	// only it may have them.
	Inet bool
}

// A condition on the low 32 bits of one argument. Only the low half is
// compared on purpose: the kernel truncates the arguments filtered here
// (ioctl's request, socket's domain and type, clone's namespace flags) to
// 32 bits, so a filter that also demanded zero high bits could be bypassed
// by setting them.
type argCond struct {
	arg  uint32
	op   condOp
	mask uint32 // for opMaskedEq
	val  uint32
}

type condOp int

const (
	opEq       condOp = iota // arg == val
	opAnyBits                // arg & val != 0
	opMaskedEq               // arg & mask == val
)

// rule applies action to a system call whose arguments meet every condition.
type rule struct {
	name   string
	conds  []argCond
	action uint32
}

const (
	retAllow = unix.SECCOMP_RET_ALLOW
	retEPERM = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	// clone3 passes its flags in memory a filter cannot read: make it look
	// unimplemented so libc and Go fall back to clone.
	retENOSYS = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
)

// rules returns the argument-checked rules, evaluated before the allowlist.
func rules(o FilterOptions) []rule {
	rs := []rule{
		{name: "ioctl", conds: []argCond{{arg: 1, op: opEq, val: unix.TIOCSTI}}, action: retEPERM},
		{name: "ioctl", conds: []argCond{{arg: 1, op: opEq, val: unix.TIOCLINUX}}, action: retEPERM},
		{name: "clone", conds: []argCond{{arg: 0, op: opAnyBits, val: namespaceCloneFlags}}, action: retEPERM},
		{name: "clone3", action: retENOSYS},
		{name: "socket", conds: []argCond{{arg: 0, op: opEq, val: unix.AF_UNIX}}, action: retAllow},
	}
	if o.Inet {
		for _, fam := range []uint32{unix.AF_INET, unix.AF_INET6} {
			// Stream and datagram only: no raw or packet sockets.
			for _, typ := range []uint32{unix.SOCK_STREAM, unix.SOCK_DGRAM} {
				rs = append(rs, rule{name: "socket", action: retAllow, conds: []argCond{
					{arg: 0, op: opEq, val: fam}, {arg: 1, op: opMaskedEq, mask: 0xf, val: typ},
				}})
			}
		}
	}
	return rs
}

// seccomp_data offsets.
const (
	offNr   = 0
	offArch = 4
	offArgs = 16
)

// assemble builds the BPF program: the architecture check, the x32 ABI
// refused, the argument rules, then the allowlist; EPERM for the rest.
//
// The program is assembled here rather than by go-seccomp-bpf's Policy
// (whose syscall tables it uses): in v1.6.0 an argument condition that
// does not match leaves the argument in the accumulator and the following
// syscall comparisons test it instead of the syscall number, so calls after
// a conditional entry are misjudged.
func assemble(o FilterOptions) ([]bpf.RawInstruction, error) {
	info, err := arch.GetInfo("")
	if err != nil {
		return nil, err
	}
	nr := func(name string) (uint32, error) {
		n, ok := info.SyscallNames[name]
		if !ok {
			return 0, fmt.Errorf("unknown system call %q for %s", name, info.Name)
		}
		return uint32(n), nil
	}
	prog := []bpf.Instruction{
		bpf.LoadAbsolute{Off: offArch, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(info.ID), SkipTrue: 1},
		bpf.RetConstant{Val: unix.SECCOMP_RET_KILL_PROCESS},
	}
	if info.SeccompMask != 0 {
		prog = append(prog,
			bpf.LoadAbsolute{Off: offNr, Size: 4},
			bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: uint32(info.SeccompMask), SkipFalse: 1},
			bpf.RetConstant{Val: retEPERM})
	}
	for _, r := range rules(o) {
		n, err := nr(r.name)
		if err != nil {
			return nil, err
		}
		// [ld nr, jne nr → end, (ld arg, [and], test → end)*, ret]
		block := []bpf.Instruction{bpf.LoadAbsolute{Off: offNr, Size: 4}, nil}
		var fails []int // indexes of jumps to patch to "end of block"
		for _, c := range r.conds {
			block = append(block, bpf.LoadAbsolute{Off: offArgs + 8*c.arg, Size: 4})
			switch c.op {
			case opEq:
				block = append(block, bpf.JumpIf{Cond: bpf.JumpEqual, Val: c.val})
			case opAnyBits:
				block = append(block, bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: c.val})
			case opMaskedEq:
				block = append(block, bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: c.mask},
					bpf.JumpIf{Cond: bpf.JumpEqual, Val: c.val})
			}
			fails = append(fails, len(block)-1)
		}
		block = append(block, bpf.RetConstant{Val: r.action})
		end := len(block)
		block[1] = bpf.JumpIf{Cond: bpf.JumpEqual, Val: n, SkipFalse: uint8(end - 2)}
		for _, i := range fails {
			j := block[i].(bpf.JumpIf)
			j.SkipFalse = uint8(end - i - 1)
			block[i] = j
		}
		prog = append(prog, block...)
	}
	allowed := make([]uint32, 0, len(allowedSyscalls)+1)
	for _, name := range append(append([]string{}, allowedSyscalls...), "ioctl") {
		n, err := nr(name)
		if err != nil {
			return nil, err
		}
		allowed = append(allowed, n)
	}
	prog = append(prog, bpf.LoadAbsolute{Off: offNr, Size: 4})
	// Chunks of at most 64 comparisons, each jumping to its own "allow".
	for len(allowed) > 0 {
		chunk := allowed[:min(64, len(allowed))]
		allowed = allowed[len(chunk):]
		for i, n := range chunk {
			prog = append(prog, bpf.JumpIf{Cond: bpf.JumpEqual, Val: n, SkipTrue: uint8(len(chunk) - i)})
		}
		prog = append(prog, bpf.Jump{Skip: 1}, bpf.RetConstant{Val: retAllow})
	}
	prog = append(prog, bpf.RetConstant{Val: retEPERM})
	return bpf.Assemble(prog)
}

// LoadFilter installs the filter on the calling thread (or, with tsync, on
// every thread of the process), setting no_new_privs first.
func LoadFilter(o FilterOptions, tsync bool) error {
	f, err := buildFilter(o)
	if err != nil {
		return err
	}
	return f.load(tsync)
}

// filter is an assembled seccomp program, built ahead of the job so that
// loading it is the only filter work on the job's path.
type filter []unix.SockFilter

func buildFilter(o FilterOptions) (filter, error) {
	raw, err := assemble(o)
	if err != nil {
		return nil, fmt.Errorf("assembling seccomp filter: %w", err)
	}
	f := make(filter, len(raw))
	for i, r := range raw {
		f[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	return f, nil
}

func (f filter) load(tsync bool) error {
	fprog := unix.SockFprog{Len: uint16(len(f)), Filter: &f[0]}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	var flags uintptr
	if tsync {
		flags = unix.SECCOMP_FILTER_FLAG_TSYNC
	}
	if _, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, uintptr(unsafe.Pointer(&fprog))); errno != 0 {
		return fmt.Errorf("loading seccomp filter: %w", errno)
	}
	return nil
}
