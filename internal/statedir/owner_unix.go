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
