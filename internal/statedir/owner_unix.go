//go:build unix

package statedir

import (
	"os"
	"syscall"
)

// checked: Check looks at owners and modes.
const checked = true

// owner returns the uid that owns st.
func owner(st os.FileInfo) (uint32, bool) {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return sys.Uid, true
}

// writable reports whether this process may make entries in dir.
func writable(dir string) bool {
	return syscall.Access(dir, 0o3) == nil // W_OK | X_OK
}
