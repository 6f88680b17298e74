package execguard

import (
	"errors"
	"fmt"
	"syscall"
)

// StartFailure says how every tier reports a job's program that could
// not be started, as a shell does: exit status 127 when it is not there,
// 126 when it is but cannot be executed (not executable, not a program
// the kernel can load, a directory, arguments too long...), with the one
// line for its stderr (without the newline). ok is false for an error
// that is not the program's (out of memory or processes, say): that
// failure is the tier's, not the job's.
func StartFailure(name string, err error) (code int, line string, ok bool) {
	var en syscall.Errno
	switch {
	case errors.Is(err, syscall.ENOENT), errors.Is(err, syscall.ENOTDIR):
		return 127, fmt.Sprintf("airlock: program %q not found", name), true
	case !errors.As(err, &en):
		return 0, "", false
	}
	switch en {
	case syscall.EACCES, syscall.EPERM, syscall.ENOEXEC, syscall.EISDIR, syscall.ELOOP,
		syscall.ENAMETOOLONG, syscall.ETXTBSY, syscall.E2BIG, syscall.ELIBBAD:
		return 126, fmt.Sprintf("airlock: program %q cannot be executed: %v", name, en), true
	}
	return 0, "", false
}
