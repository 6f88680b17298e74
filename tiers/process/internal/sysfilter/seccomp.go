// Package sysfilter is the process tier's seccomp policy, as data, and
// its assembler into a classic BPF program. The tier assembles each
// program once per process and sends it to the sandbox's stage, which
// only loads it: the stage binary then carries neither the assembler nor
// go-seccomp-bpf's system call tables (whose initialisation alone took
// 0.26 ms of every cold start).
package sysfilter

import (
	"encoding/binary"
	"fmt"
	"slices"
	"sync"

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
	// NoUnix refuses AF_UNIX sockets too (socketpair stays). Level 2
	// shares the host's network namespace, where abstract Unix sockets
	// have no permissions at all: only Landlock's scoping (ABI 6, Linux
	// 6.12) keeps a program from connecting to the host's, so on older
	// kernels the filter tier sets this.
	NoUnix bool
	// NoMemfd refuses memfd_create: Landlock does not govern executing
	// an anonymous file, so levels 2 and 3 set this when spawn is withheld.
	NoMemfd bool
	// NoInotify refuses the inotify calls: at level 2 a watch would show
	// activity in host directories the job may search but Landlock keeps
	// it from opening (other users' files appearing in /tmp, say).
	NoInotify bool
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
	}
	if !o.NoUnix {
		rs = append(rs, rule{name: "socket", conds: []argCond{{arg: 0, op: opEq, val: unix.AF_UNIX}}, action: retAllow})
	}
	// mknod makes named pipes (mkfifo) only, as every tier lets a program
	// do where it may write; device nodes stay refused (Landlock refuses
	// them too).
	rs = append(rs,
		rule{name: "mknod", conds: []argCond{{arg: 1, op: opMaskedEq, mask: unix.S_IFMT, val: unix.S_IFIFO}}, action: retAllow},
		rule{name: "mknodat", conds: []argCond{{arg: 2, op: opMaskedEq, mask: unix.S_IFMT, val: unix.S_IFIFO}}, action: retAllow})
	if o.NoMemfd {
		rs = append(rs, rule{name: "memfd_create", action: retEPERM})
	}
	if o.NoInotify {
		for _, name := range []string{"inotify_init", "inotify_init1", "inotify_add_watch"} {
			rs = append(rs, rule{name: name, action: retEPERM})
		}
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
// refused, then a binary search on the system call number whose leaves are
// "allow", the call's argument rules (in policy order; a call whose rules
// all fail to match is allowed if it is on the allowlist), or EPERM.
//
// A search tree rather than a list: the kernel evaluates the filter on
// every system call the job makes, and when it is attached it runs it
// once for every system call number to find the ones it may cache as
// always allowed. With the ~300-instruction list this program used to be,
// attaching took 0.6 ms here, most of a container's confinement; the tree
// needs about a dozen comparisons per call.
//
// The program is assembled here rather than by go-seccomp-bpf's Policy
// (whose syscall tables it uses): in v1.6.0 an argument condition that
// does not match leaves the argument in the accumulator and the following
// syscall comparisons test it instead of the syscall number, so calls after
// a conditional entry are misjudged.
func assemble(o FilterOptions) ([]bpf.RawInstruction, error) {
	_, prog, nr, err := prologue()
	if err != nil {
		return nil, err
	}
	// Each listed call's leaf: its argument rules in order, then allow or
	// EPERM.
	leaves := map[uint32][]bpf.Instruction{}
	allowed := map[uint32]bool{}
	for _, name := range append(append([]string{}, allowedSyscalls...), "ioctl") {
		n, err := nr(name)
		if err != nil {
			return nil, err
		}
		allowed[n] = true
	}
	for _, r := range rules(o) {
		n, err := nr(r.name)
		if err != nil {
			return nil, err
		}
		leaves[n] = append(leaves[n], ruleBlock(r)...)
	}
	nrs := make([]uint32, 0, len(allowed)+len(leaves))
	for n := range allowed {
		nrs = append(nrs, n)
	}
	for n := range leaves {
		if !allowed[n] {
			nrs = append(nrs, n)
		}
	}
	slices.Sort(nrs)
	leaf := func(n uint32) []bpf.Instruction {
		verdict := bpf.RetConstant{Val: retEPERM}
		if allowed[n] {
			verdict.Val = retAllow
		}
		return append(slices.Clip(leaves[n]), verdict)
	}
	tree, err := searchTree(nrs, leaf)
	if err != nil {
		return nil, err
	}
	prog = append(prog, bpf.LoadAbsolute{Off: offNr, Size: 4})
	prog = append(prog, tree...)
	return bpf.Assemble(prog)
}

// prologue returns this machine's architecture, the program's start —
// a foreign architecture killed, the x32 ABI refused — and the lookup of
// system call numbers by name.
func prologue() (*arch.Info, []bpf.Instruction, func(string) (uint32, error), error) {
	info, err := arch.GetInfo("")
	if err != nil {
		return nil, nil, nil, err
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
	return info, prog, nr, nil
}

// ruleBlock is one rule's argument checks and its action:
// [(ld arg, [and], test → end)*, ret action]; a failing check jumps past
// the block (to the next rule, or the call's verdict). It leaves an
// argument in the accumulator.
func ruleBlock(r rule) []bpf.Instruction {
	var block []bpf.Instruction
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
	for _, i := range fails {
		j := block[i].(bpf.JumpIf)
		j.SkipFalse = uint8(end - i - 1)
		block[i] = j
	}
	return block
}

// searchTree is a binary search over the sorted numbers in nrs, the
// accumulator holding the system call number. A range of at most
// groupSize numbers is tested in turn: a plain "allow" jumps to the
// group's shared allow, a call with argument rules is followed by its
// leaf; anything else gets EPERM. Every path ends in a return, so
// subtrees are self-contained and placed one after the other. Leaves do
// not use the accumulator's value.
func searchTree(nrs []uint32, leaf func(uint32) []bpf.Instruction) ([]bpf.Instruction, error) {
	const groupSize = 8
	if len(nrs) <= groupSize {
		var out []bpf.Instruction
		var toAllow []int // plain compares, to point at the shared allow
		for _, n := range nrs {
			l := leaf(n)
			if len(l) == 1 && l[0] == (bpf.RetConstant{Val: retAllow}) {
				toAllow = append(toAllow, len(out))
				out = append(out, bpf.JumpIf{Cond: bpf.JumpEqual, Val: n})
				continue
			}
			if len(l) > 255 {
				return nil, fmt.Errorf("seccomp rules for system call %d too long (%d instructions)", n, len(l))
			}
			out = append(out, bpf.JumpIf{Cond: bpf.JumpEqual, Val: n, SkipFalse: uint8(len(l))})
			out = append(out, l...)
		}
		out = append(out, bpf.RetConstant{Val: retEPERM}, bpf.RetConstant{Val: retAllow})
		allow := len(out) - 1
		for _, i := range toAllow {
			if allow-i-1 > 255 {
				return nil, fmt.Errorf("seccomp search group too long (%d instructions)", len(out))
			}
			j := out[i].(bpf.JumpIf)
			j.SkipTrue = uint8(allow - i - 1)
			out[i] = j
		}
		return out, nil
	}
	mid := len(nrs) / 2
	left, err := searchTree(nrs[:mid], leaf)
	if err != nil {
		return nil, err
	}
	right, err := searchTree(nrs[mid:], leaf)
	if err != nil {
		return nil, err
	}
	// nr >= nrs[mid]: the jump over the left subtree (a long jump: ja).
	out := []bpf.Instruction{
		bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: nrs[mid], SkipFalse: 1},
		bpf.Jump{Skip: uint32(len(left))},
	}
	return append(append(out, left...), right...), nil
}

var programs = map[FilterOptions]func() ([]byte, error){}

func init() {
	for _, o := range []FilterOptions{
		{},                                        // guarded workers'
		{Inet: true}, {Inet: true, NoMemfd: true}, // level 3's, with and without spawn
		{NoInotify: true}, {NoUnix: true, NoInotify: true}, // level 2's
		{NoInotify: true, NoMemfd: true}, {NoUnix: true, NoInotify: true, NoMemfd: true}, // and without spawn
	} {
		programs[o] = sync.OnceValues(func() ([]byte, error) { return program(o) })
	}
}

// Program is the policy for o as a seccomp program: 8-byte sock_filter
// records in the machine's byte order, what stage.LoadProgram takes.
// It is assembled once per process.
func Program(o FilterOptions) ([]byte, error) {
	p := programs[o]
	if p == nil {
		return nil, fmt.Errorf("seccomp filter: no policy for %+v", o)
	}
	return p()
}

func program(o FilterOptions) ([]byte, error) {
	raw, err := assemble(o)
	if err != nil {
		return nil, fmt.Errorf("assembling seccomp filter: %w", err)
	}
	return encode(raw), nil
}

func encode(raw []bpf.RawInstruction) []byte {
	out := make([]byte, 0, 8*len(raw))
	for _, r := range raw {
		out = binary.NativeEndian.AppendUint16(out, r.Op)
		out = append(out, r.Jt, r.Jf)
		out = binary.NativeEndian.AppendUint32(out, r.K)
	}
	return out
}
