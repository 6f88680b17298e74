// Package hostpath decides which host paths a job may be granted to read,
// and says what a granted path is, so that an approval binds what is
// mounted rather than the name the job wrote.
//
// A grant is resolved to the real path it names (every symbolic link
// followed, as the kernel sees it), and that real path must lie under one
// of the operator's roots and outside every path the server keeps for
// itself. Tiers then open the real path refusing any symbolic link, so a
// link swapped in after the check is never followed.
package hostpath

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock"
)

// MaxContentDigest is the largest regular file whose content [Identity]
// hashes. Larger files are identified by device, inode, size and
// modification time only.
const MaxContentDigest = 1 << 20

// Roots are the host directories a caller may grant, and the paths
// refused even under them. The zero value allows nothing. A Roots is
// immutable.
type Roots struct {
	allow []string // real paths
	deny  []string // real paths where they exist, else cleaned absolute paths
}

// NewRoots resolves allow and deny. Each allowed root must exist and be
// absolute; a denied path need not exist yet (an audit file the server
// will create, say).
func NewRoots(allow, deny []string) (Roots, error) {
	var r Roots
	for _, p := range allow {
		if !filepath.IsAbs(p) {
			return Roots{}, fmt.Errorf("read root %q is not an absolute path", p)
		}
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			return Roots{}, fmt.Errorf("read root %s: %w", p, unwrapPath(err))
		}
		r.allow = append(r.allow, real)
	}
	for _, p := range deny {
		if p == "" {
			continue
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			return Roots{}, err
		}
		r.deny = append(r.deny, abs)
		if real, err := filepath.EvalSymlinks(abs); err == nil && real != abs {
			r.deny = append(r.deny, real)
		}
	}
	return r, nil
}

// Allowed returns the real paths of the roots.
func (r Roots) Allowed() []string { return append([]string(nil), r.allow...) }

// Resolve returns paths with each entry replaced by the real path it
// names. A path that does not exist is an invalid job; one whose real
// path lies outside every root, or under a path the server keeps, is
// refused as a denied filesystem capability naming the roots.
func (r Roots) Resolve(paths []string) ([]string, error) {
	if len(paths) == 0 {
		return paths, nil
	}
	out := make([]string, len(paths))
	for i, p := range paths {
		real, err := Real(p)
		if err != nil {
			return nil, airlock.Invalid("grants.fs.read", "%s: %s", p, unwrapPath(err))
		}
		shown := real
		if real != p {
			shown = real + " (named " + p + ")"
		}
		for _, d := range r.deny {
			if within(real, d) || within(d, real) {
				return nil, &airlock.Denied{Capability: "fs", Detail: "read " + shown + ": the server keeps " + d + " for itself"}
			}
		}
		ok := false
		for _, root := range r.allow {
			if within(real, root) {
				ok = true
				break
			}
		}
		if !ok {
			if len(r.allow) == 0 {
				return nil, &airlock.Denied{Capability: "fs", Detail: "read " + shown + ": no host path may be granted (no read roots)"}
			}
			return nil, &airlock.Denied{Capability: "fs", Detail: "read " + shown + ": outside the read roots [" + strings.Join(r.allow, " ") + "]"}
		}
		out[i] = real
	}
	return out, nil
}

// within reports whether p is dir or lies beneath it.
func within(p, dir string) bool {
	if dir == "/" {
		return true
	}
	return p == dir || strings.HasPrefix(p, dir+"/")
}

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
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(f, MaxContentDigest+1))
	if err != nil {
		return "", err
	}
	if n > MaxContentDigest {
		return "", fmt.Errorf("%s grew while it was read", p)
	}
	return fmt.Sprintf("file %s size %d sha256 %s", id, n, hex.EncodeToString(h.Sum(nil))), nil
}

func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
