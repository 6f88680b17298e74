//go:build linux

// Package execguard lets a program execute exactly one other program, the
// job, under a seccomp filter that refuses every later execve and every
// execveat: what the job executes fails with EACCES (a shell says 126),
// while forking itself stays allowed.
//
// The filter lets an execve through only when its three unused argument
// registers hold a random key. The guard makes the key, installs the
// filter and executes the job with it; the job cannot, because the key
// exists only in the guard's memory, which the execve discards, and in the
// filter, which a process without CAP_SYS_ADMIN cannot read back. It needs
// neither Landlock nor a page the job cannot map, so it works the same in
// gVisor (which implements neither) and in the microVM's guest.
package execguard

import (
	"encoding/binary"
	"fmt"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Key is what an allowed execve carries in its 4th to 6th arguments.
type Key [3]uint64

// NewKey returns a fresh random key, from getrandom(2) rather than
// crypto/rand: the process tier's stage binary serves the guard, and
// crypto/rand's imports would make the large binary initialise its heavy
// packages before its stages dispatch.
func NewKey() (Key, error) {
	var b [24]byte
	for n := 0; n < len(b); {
		m, err := unix.Getrandom(b[n:], 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return Key{}, os.NewSyscallError("getrandom", err)
		}
		n += m
	}
	var k Key
	for i := range k {
		k[i] = binary.LittleEndian.Uint64(b[i*8:])
	}
	return k, nil
}

// filter is the seccomp program for key k.
func filter(k Key) []unix.SockFilter {
	const (
		ldW    = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq    = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		jge    = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
		ret    = unix.BPF_RET | unix.BPF_K
		eacces = unix.SECCOMP_RET_ERRNO | uint32(unix.EACCES)
		eperm  = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
		// Offsets in struct seccomp_data.
		offNr   = 0
		offArch = 4
		offArgs = 16
	)
	prog := []unix.SockFilter{
		{Code: ldW, K: offArch},
		{Code: jeq, Jt: 1, K: unix.AUDIT_ARCH_X86_64},
		{Code: ret, K: unix.SECCOMP_RET_KILL_PROCESS}, // another ABI
		{Code: ldW, K: offNr},
		{Code: jge, Jt: 4, K: 0x40000000},        // x32: refuse
		{Code: jeq, Jt: 4, K: unix.SYS_PTRACE},   // refuse (EPERM)
		{Code: jeq, Jt: 2, K: unix.SYS_EXECVEAT}, // refuse
		{Code: jeq, Jt: 3, K: unix.SYS_EXECVE},   // check the key
		{Code: ret, K: unix.SECCOMP_RET_ALLOW},
		{Code: ret, K: eacces},
		{Code: ret, K: eperm},
	}
	// ptrace is refused because a tracer could rewrite a traced child's
	// allowed system call into an execve at its entry stop, after the
	// filter has passed it: gVisor does not check the filter again
	// (Linux has since 4.8).
	//
	// The key check (from index 11): six 32-bit words, each jumping to the
	// refusal at the end on a mismatch (BPF jumps only forward).
	for i, v := range k {
		for half, w := range []uint32{uint32(v), uint32(v >> 32)} {
			prog = append(prog,
				unix.SockFilter{Code: ldW, K: uint32(offArgs + (3+i)*8 + half*4)},
				unix.SockFilter{Code: jeq, K: w})
		}
	}
	prog = append(prog, unix.SockFilter{Code: ret, K: unix.SECCOMP_RET_ALLOW}, unix.SockFilter{Code: ret, K: eacces})
	last := len(prog) - 1
	for i := 12; i < last-1; i += 2 {
		prog[i].Jf = uint8(last - (i + 1))
	}
	return prog
}

// Install sets no_new_privs and installs the filter for k on every thread
// of the calling process.
func Install(k Key) error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	prog := filter(k)
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog))); e != 0 {
		return fmt.Errorf("seccomp: %w", e)
	}
	return nil
}

// Exec executes path with the key the filter lets through; it returns only
// on failure.
func Exec(path string, argv, env []string, k Key) error {
	p, err := syscall.BytePtrFromString(path)
	if err != nil {
		return err
	}
	argvp, err := syscall.SlicePtrFromStrings(argv)
	if err != nil {
		return err
	}
	envp, err := syscall.SlicePtrFromStrings(env)
	if err != nil {
		return err
	}
	_, _, errno := unix.RawSyscall6(unix.SYS_EXECVE, uintptr(unsafe.Pointer(p)),
		uintptr(unsafe.Pointer(&argvp[0])), uintptr(unsafe.Pointer(&envp[0])),
		uintptr(k[0]), uintptr(k[1]), uintptr(k[2]))
	return errno
}
