package collect

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// Path collects from the scratch directory at dir (the directory itself
// is opened without following a link).
func Path(dir string, patterns []string, maxBytes int64) (Result, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return Result{}, fmt.Errorf("collecting files: opening the scratch directory: %w", err)
	}
	root := fdTree(fd)
	defer root.Close()
	return Walk(root, patterns, maxBytes), nil
}

// fdTree is a directory descriptor; every name is looked up relative to
// it.
type fdTree int

func (d fdTree) Close() { unix.Close(int(d)) }

func (d fdTree) Names() ([]string, error) {
	fd, err := unix.Openat(int(d), ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), ".")
	defer f.Close()
	var names []string
	for len(names) <= maxEntries {
		batch, err := f.Readdirnames(256)
		names = append(names, batch...)
		if err == io.EOF || len(batch) == 0 {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	return names, nil
}

func (d fdTree) Stat(name string) (Kind, int64, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(int(d), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return Missing, 0, nil
		}
		return Other, 0, err
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		return Regular, st.Size, nil
	case unix.S_IFDIR:
		return Directory, 0, nil
	case unix.S_IFLNK:
		return Link, 0, nil
	}
	return Other, 0, nil
}

func (d fdTree) Sub(name string) (Tree, error) {
	fd, err := unix.Openat(int(d), name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		return nil, ErrLink
	}
	if err != nil {
		return nil, err
	}
	return fdTree(fd), nil
}

func (d fdTree) Read(name string, limit int64) ([]byte, error) {
	// O_NOFOLLOW and the check after opening: the name may have been
	// swapped for a link or a FIFO since it was looked at.
	fd, err := unix.Openat(int(d), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ELOOP) {
		return nil, ErrLink
	}
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, errors.New("not a regular file")
	}
	return io.ReadAll(io.LimitReader(f, limit))
}
