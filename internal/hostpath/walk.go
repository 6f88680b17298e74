package hostpath

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Where openat2 is missing, a path is opened one component at a time from
// its volume's root, each through the os.Root of its parent: a component
// is refused if Lstat says it is a symbolic link (or, before the last, not
// a directory), and the object opened must be the one Lstat saw, so a link
// swapped in between is never used. Linux builds use openat2 instead;
// these also run there, in tests, against the same cases.

// linkError is the refusal of a path that is or passes through a link.
func linkError(p string) error {
	return fmt.Errorf("%s is or passes through a symbolic link (grant the path it points to)", p)
}

// walk opens every directory on the way to p's last element and returns
// that element's parent, its name and what Lstat said of it. For a
// volume's root, dir is the root itself and name is ".". The caller
// closes dir.
func walk(p string) (dir *os.Root, name string, fi fs.FileInfo, err error) {
	if !filepath.IsAbs(p) {
		return nil, "", nil, fmt.Errorf("%q is not an absolute path", p)
	}
	p = filepath.Clean(p)
	vol := filepath.VolumeName(p)
	sep := string(filepath.Separator)
	if dir, err = os.OpenRoot(vol + sep); err != nil {
		return nil, "", nil, err
	}
	rest := strings.TrimPrefix(p[len(vol):], sep)
	if rest == "" {
		if fi, err = dir.Stat("."); err != nil {
			dir.Close()
			return nil, "", nil, err
		}
		return dir, ".", fi, nil
	}
	parts := strings.Split(rest, sep)
	for i, part := range parts {
		if fi, err = dir.Lstat(part); err != nil {
			dir.Close()
			return nil, "", nil, &os.PathError{Op: "open", Path: p, Err: unwrapPath(err)}
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			dir.Close()
			return nil, "", nil, linkError(p)
		}
		if i == len(parts)-1 {
			return dir, part, fi, nil
		}
		next, err := openDir(dir, part, fi, p)
		dir.Close()
		if err != nil {
			return nil, "", nil, err
		}
		dir = next
	}
	panic("unreachable")
}

// openDir opens the directory name in dir, which Lstat described as fi,
// refusing whatever else is there by the time it is opened.
func openDir(dir *os.Root, name string, fi fs.FileInfo, p string) (*os.Root, error) {
	if !fi.IsDir() {
		return nil, &os.PathError{Op: "open", Path: p, Err: errors.New("not a directory")}
	}
	r, err := dir.OpenRoot(name)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: p, Err: unwrapPath(err)}
	}
	if got, err := r.Stat("."); err != nil || !os.SameFile(fi, got) {
		r.Close()
		return nil, linkError(p)
	}
	return r, nil
}

// openRootWalk is [OpenRoot] by walk.
func openRootWalk(p string) (*os.Root, error) {
	dir, name, fi, err := walk(p)
	if err != nil {
		return nil, err
	}
	if name == "." {
		return dir, nil
	}
	defer dir.Close()
	return openDir(dir, name, fi, p)
}

// checkWalk is [Check] by walk.
func checkWalk(p string) error {
	dir, _, _, err := walk(p)
	if err == nil {
		dir.Close()
	}
	return err
}

// identityWalk is [Identity] by walk, where [statID] can identify a file.
func identityWalk(p string) (string, error) {
	dir, name, fi, err := walk(p)
	if err != nil {
		return "", err
	}
	defer dir.Close()
	id, ifmt, ok := statID(fi)
	if !ok {
		return "", fmt.Errorf("%s: files have no device and inode here, so an approval cannot bind one", p)
	}
	switch {
	case fi.IsDir():
		return "dir " + id, nil
	case fi.Mode().IsRegular():
	default:
		return fmt.Sprintf("other %o %s", ifmt, id), nil
	}
	if fi.Size() > MaxContentDigest {
		mt := fi.ModTime()
		return fmt.Sprintf("file %s size %d mtime %d.%09d", id, fi.Size(), mt.Unix(), mt.Nanosecond()), nil
	}
	f, err := dir.Open(name)
	if err != nil {
		return "", &os.PathError{Op: "open", Path: p, Err: unwrapPath(err)}
	}
	defer f.Close()
	if got, err := f.Stat(); err != nil || !os.SameFile(fi, got) {
		return "", linkError(p)
	}
	return fileIdentity(id, p, f)
}
