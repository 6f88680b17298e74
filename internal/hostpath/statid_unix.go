//go:build unix

package hostpath

import (
	"fmt"
	"io/fs"
	"syscall"
)

// statID names the object fi describes by device and inode, and gives its
// type bits, as [Identity] words them.
func statID(fi fs.FileInfo) (id string, ifmt uint32, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "", 0, false
	}
	return fmt.Sprintf("dev %d ino %d", st.Dev, st.Ino), uint32(st.Mode) & syscall.S_IFMT, true
}
