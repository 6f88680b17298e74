package stage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// filter is a seccomp program (package seccomp assembles it, the parent
// sends it), decoded ahead of the job so that loading it is the only
// filter work on the job's path.
type filter []unix.SockFilter

// parseFilter decodes a program of 8-byte sock_filter records. A sandbox
// never runs without one: an empty or malformed program is an error.
func parseFilter(raw []byte) (filter, error) {
	if len(raw) == 0 || len(raw)%8 != 0 || len(raw)/8 > 4096 {
		return nil, errors.New("no valid seccomp program in the spec")
	}
	f := make(filter, len(raw)/8)
	for i := range f {
		r := raw[8*i:]
		f[i] = unix.SockFilter{Code: binary.NativeEndian.Uint16(r), Jt: r[2], Jf: r[3], K: binary.NativeEndian.Uint32(r[4:])}
	}
	return f, nil
}

// LoadProgram installs a program from package seccomp on the calling
// thread (or, with tsync, on every thread of the process), setting
// no_new_privs first.
func LoadProgram(raw []byte, tsync bool) error {
	f, err := parseFilter(raw)
	if err != nil {
		return err
	}
	return f.load(tsync)
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
