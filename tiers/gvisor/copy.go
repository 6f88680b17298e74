package gvisor

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Copy grants.
//
// A copy grant is bound writable, so runsc lays its memory overlay over
// it: the host tree is the overlay's read-only lower layer, every change
// lands in sandbox memory (capped, with a scratch cap, at grants.fs.
// scratch_mb by the overlay's size) and vanishes with the sandbox. The
// tree keeps the host's owners, which the job's user would not be able
// to write; so, before the program starts, the agent (root inside the
// sandbox) gives the job's user every directory and file of the copy the
// job could already read, and nothing else: a file or directory the job
// could not read stays closed to it. Changing an owner copies the file
// into the overlay, which is how the copy counts against the scratch cap;
// a copy beyond it fails the job before the program starts.

// ownCopy gives uid, inside the sandbox, what it may read under guest.
// Links are not followed (a link inside the copy is resolved in the
// sandbox's own view, never the host's), and a directory the job cannot
// read is not entered.
func ownCopy(guest string, uid int) error {
	root, err := filepath.EvalSymlinks(guest)
	if err != nil {
		return err
	}
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && !d.Type().IsRegular() {
			return nil // links, devices, sockets, pipes: left as they are
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		if !readable(st, uid) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if int(st.Uid) == uid && int(st.Gid) == uid {
			return nil
		}
		return os.Lchown(p, uid, uid)
	})
}

// readable reports whether uid, whose only group is the one of the same
// number, may read the file st describes (and, for a directory, search
// it), by its mode bits.
func readable(st *syscall.Stat_t, uid int) bool {
	mode := st.Mode & 0o777
	var bits uint32
	switch {
	case int(st.Uid) == uid:
		bits = mode >> 6
	case int(st.Gid) == uid:
		bits = mode >> 3 & 7
	default:
		bits = mode & 7
	}
	want := uint32(4)
	if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		want = 5
	}
	return bits&want == want
}
