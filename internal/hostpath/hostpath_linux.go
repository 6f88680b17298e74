package hostpath

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Real returns the real path that p names: every symbolic link followed,
// as the kernel resolved it when opening p.
func Real(p string) (string, error) {
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("%q is not an absolute path", p)
	}
	fd, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", &os.PathError{Op: "open", Path: p, Err: err}
	}
	defer unix.Close(fd)
	real, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return "", err
	}
	if !strings.HasPrefix(real, "/") || strings.HasSuffix(real, " (deleted)") {
		return "", fmt.Errorf("%s has no path in this mount namespace", p)
	}
	return real, nil
}

// Open opens p with O_PATH, refusing a symbolic link anywhere on the
// path: the real path [Roots.Resolve] returned names exactly one object,
// and a link swapped in since is not followed.
func Open(p string) (int, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, p, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ELOOP) {
		return -1, fmt.Errorf("%s is or passes through a symbolic link (grant the path it points to)", p)
	}
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: p, Err: err}
	}
	return fd, nil
}

// OpenRoot opens the directory p as an [os.Root] through [Open]: the
// root is the directory the path names without following a link.
func OpenRoot(p string) (*os.Root, error) {
	fd, err := Open(p)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	// Reopening the descriptor's magic link gives the same directory.
	return os.OpenRoot("/proc/self/fd/" + strconv.Itoa(fd))
}

// Check reports whether p can be opened without following a symbolic
// link (see [Open]).
func Check(p string) error {
	fd, err := Open(p)
	if err == nil {
		unix.Close(fd)
	}
	return err
}

// Identity describes the object at the real path p: its type, device and
// inode, and for a regular file its size and, up to [MaxContentDigest]
// bytes, the SHA-256 of its content (else its modification time). Two
// calls return the same text only for the same object with, where it
// was hashed, the same content. A path that passes through a symbolic
// link has no identity.
func Identity(p string) (string, error) {
	fd, err := Open(p)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return "", err
	}
	id := fmt.Sprintf("dev %d ino %d", st.Dev, st.Ino)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return "dir " + id, nil
	case unix.S_IFREG:
	default:
		return fmt.Sprintf("other %o %s", st.Mode&unix.S_IFMT, id), nil
	}
	if st.Size > MaxContentDigest {
		return fmt.Sprintf("file %s size %d mtime %d.%09d", id, st.Size, st.Mtim.Sec, st.Mtim.Nsec), nil
	}
	// Reopen the object the O_PATH descriptor holds, not the name.
	f, err := os.Open("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return "", err
	}
	defer f.Close()
	return fileIdentity(id, p, f)
}
