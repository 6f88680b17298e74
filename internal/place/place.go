//go:build linux

// Package place writes a job's files into a sandbox's scratch directory
// without ever following a link there.
//
// A session's or persistent workspace's scratch outlives its jobs, so what
// an earlier job left in it — a symbolic link where a later job's file
// goes, a link in place of one of its directories, a hard link to another
// file, a FIFO — is under the earlier job's control. Files places a job's
// files in two passes. The first writes nothing: it walks every name and
// refuses the whole placement if anything on the way is a symbolic link,
// a directory is not a directory, or a file is not a plain regular file
// with a single link. The second writes, walking each name one component
// at a time from the scratch's descriptor (openat with O_NOFOLLOW, mkdirat)
// and opening each file with O_NOFOLLOW, and re-checks what it opened with
// fstat: a link made between the passes fails the write rather than being
// followed.
//
// Only openat, mkdirat, fstatat and fstat are used (no openat2), so the
// package also works inside gVisor.
package place

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// Sources is this package's code: the process tier's stage code digest
// covers it, so that a separate stage binary built from older placement
// code is not taken for this build's.
//
//go:embed *.go
var Sources embed.FS

// Options say how what is placed is made.
type Options struct {
	// FileMode and DirMode are the permissions of the files and
	// directories created (the umask applies); an existing file keeps its
	// mode, as with os.WriteFile.
	FileMode, DirMode fs.FileMode
	// Owner, when set, owns every file written and every directory
	// created (directories that already exist keep their owner).
	Owner *Owner
}

// Owner is a uid and gid.
type Owner struct{ UID, GID int }

// Files writes files (clean relative name → content) under dir, in name
// order. It refuses, before writing anything, a placement that would go
// through a symbolic link, through something other than a directory, or
// into something other than a regular file with a single link; the error
// is "placing file NAME: why". dir itself is the caller's and is trusted.
func Files[C ~string | ~[]byte](dir string, files map[string]C, o Options) error {
	if len(files) == 0 {
		return nil
	}
	root, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening scratch: %w", &os.PathError{Op: "open", Path: dir, Err: err})
	}
	defer unix.Close(root)
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if err := check(root, name, files); err != nil {
			return fmt.Errorf("placing file %s: %w", name, err)
		}
	}
	for _, name := range names {
		if err := write(root, name, []byte(files[name]), o); err != nil {
			return fmt.Errorf("placing file %s: %w", name, err)
		}
	}
	return nil
}

// Refused is the error for a placement refused because of what is (or is
// not) at a name in the scratch.
type Refused struct {
	Path string // the component or file, relative to the scratch
	Why  string
}

func (e *Refused) Error() string { return e.Path + " " + e.Why }

// components splits a clean relative name; anything else (absolute, "",
// ".", ".." or empty components) is refused here too, as a second line
// behind the job's validation.
func components(name string) ([]string, error) {
	parts := strings.Split(name, "/")
	for _, p := range parts {
		if p == "" || p == "." || p == ".." || strings.IndexByte(p, 0) >= 0 {
			return nil, errors.New("not a clean relative name inside the scratch")
		}
	}
	return parts, nil
}

// check walks name from root without writing, and refuses what the write
// would have to go through or into.
func check[C ~string | ~[]byte](root int, name string, files map[string]C) error {
	parts, err := components(name)
	if err != nil {
		return err
	}
	for i := 1; i < len(parts); i++ {
		if d := strings.Join(parts[:i], "/"); hasKey(files, d) {
			return &Refused{d, "is placed as a file and is also needed as a directory"}
		}
	}
	dir, owned := root, false
	defer func() {
		if owned {
			unix.Close(dir)
		}
	}()
	for i, p := range parts {
		at := strings.Join(parts[:i+1], "/")
		var st unix.Stat_t
		err := unix.Fstatat(dir, p, &st, unix.AT_SYMLINK_NOFOLLOW)
		if errors.Is(err, unix.ENOENT) {
			return nil // the rest is made by the write, in directories it makes
		}
		if err != nil {
			return &os.PathError{Op: "stat", Path: at, Err: err}
		}
		last := i == len(parts)-1
		if err := refuse(at, &st, last); err != nil {
			return err
		}
		if last {
			return nil
		}
		next, err := openDir(dir, p, at)
		if err != nil {
			return err
		}
		if owned {
			unix.Close(dir)
		}
		dir, owned = next, true
	}
	return nil
}

// refuse says what is wrong with an existing component at: a symbolic
// link anywhere; a non-directory on the way; at the end, anything but a
// regular file with one link (writing to a hard-linked file would change
// what its other names show).
func refuse(at string, st *unix.Stat_t, last bool) error {
	typ := st.Mode & unix.S_IFMT
	switch {
	case typ == unix.S_IFLNK:
		return &Refused{at, "is a symbolic link (placing never follows links left in the scratch)"}
	case !last && typ != unix.S_IFDIR:
		return &Refused{at, "is not a directory (" + kind(typ) + ")"}
	case last && typ != unix.S_IFREG:
		return &Refused{at, "exists and is not a regular file (" + kind(typ) + ")"}
	case last && st.Nlink > 1:
		return &Refused{at, fmt.Sprintf("is a hard link (%d names share the file)", st.Nlink)}
	}
	return nil
}

func kind(typ uint32) string {
	switch typ {
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFREG:
		return "a regular file"
	case unix.S_IFLNK:
		return "a symbolic link"
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFBLK:
		return "a block device"
	}
	return fmt.Sprintf("type %#o", typ)
}

// openDir opens the directory p in dir without following a link, and
// explains a refusal: O_NOFOLLOW|O_DIRECTORY fails on a link or a
// non-directory, which fstatat then names.
func openDir(dir int, p, at string) (int, error) {
	fd, err := unix.Openat(dir, p, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == nil {
		return fd, nil
	}
	if errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
		var st unix.Stat_t
		if unix.Fstatat(dir, p, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			if r := refuse(at, &st, false); r != nil {
				return -1, r
			}
		}
	}
	return -1, &os.PathError{Op: "open", Path: at, Err: err}
}

// write places one file, walking its directories from root and making
// those that are missing; nothing on the way is followed.
func write(root int, name string, data []byte, o Options) error {
	parts, err := components(name)
	if err != nil {
		return err
	}
	dir, owned := root, false
	defer func() {
		if owned {
			unix.Close(dir)
		}
	}()
	for i, p := range parts[:len(parts)-1] {
		at := strings.Join(parts[:i+1], "/")
		next, err := openDir(dir, p, at)
		if errors.Is(err, unix.ENOENT) {
			next, err = makeDir(dir, p, at, o)
		}
		if err != nil {
			return err
		}
		if owned {
			unix.Close(dir)
		}
		dir, owned = next, true
	}
	return writeFile(dir, parts[len(parts)-1], name, data, o)
}

// makeDir makes the directory p in dir and opens it; the open does not
// follow a link that replaced it meanwhile.
func makeDir(dir int, p, at string, o Options) (int, error) {
	if err := unix.Mkdirat(dir, p, uint32(o.DirMode.Perm())); err != nil && !errors.Is(err, unix.EEXIST) {
		return -1, &os.PathError{Op: "mkdir", Path: at, Err: err}
	}
	if o.Owner == nil {
		return openDir(dir, p, at)
	}
	// Readable, so that it can be chowned through its descriptor (an
	// O_PATH descriptor cannot be).
	fd, err := unix.Openat(dir, p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if _, r := openDir(dir, p, at); r != nil {
			return -1, r
		}
		return -1, &os.PathError{Op: "open", Path: at, Err: err}
	}
	if err := unix.Fchown(fd, o.Owner.UID, o.Owner.GID); err != nil {
		unix.Close(fd)
		return -1, &os.PathError{Op: "chown", Path: at, Err: err}
	}
	return fd, nil
}

// writeFile opens base in dir with O_NOFOLLOW (O_NONBLOCK: a FIFO put
// there meanwhile fails rather than blocks), checks that it is a regular
// file with one link, and only then truncates and writes it.
func writeFile(dir int, base, name string, data []byte, o Options) error {
	fd, err := unix.Openat(dir, base, unix.O_WRONLY|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, uint32(o.FileMode.Perm()))
	if err != nil {
		var st unix.Stat_t
		if unix.Fstatat(dir, base, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			if r := refuse(name, &st, true); r != nil {
				return r
			}
		}
		return &os.PathError{Op: "open", Path: name, Err: err}
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &os.PathError{Op: "stat", Path: name, Err: err}
	}
	if err := refuse(name, &st, true); err != nil {
		return err
	}
	if err := unix.Ftruncate(fd, 0); err != nil {
		return &os.PathError{Op: "truncate", Path: name, Err: err}
	}
	if o.Owner != nil {
		if err := unix.Fchown(fd, o.Owner.UID, o.Owner.GID); err != nil {
			return &os.PathError{Op: "chown", Path: name, Err: err}
		}
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	return f.Close()
}

func hasKey[C any](m map[string]C, k string) bool {
	_, ok := m[k]
	return ok
}
