package stage

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"

	"golang.org/x/sys/unix"
)

// A copy grant (grants.fs.copy) is copied by the stage, inside the
// sandbox's user namespace, from the read grant's descriptor — the
// detached, read-only clone the parent opened refusing links — into a
// tmpfs that also holds the job's scratch when the scratch is the
// sandbox's own, so the copies and the scratch share grants.fs.scratch_mb.
// (A session's or workspace's scratch lives elsewhere: the copies then get
// a tmpfs of their own, capped at scratch_mb.) The copy is then bound at
// the grant's guest path, writable.
//
// What is copied is what the sandbox could read through the read grant:
// regular files and directories. Symbolic links are not copied, so a link
// in the grant that points out of it leads nowhere; nor are devices,
// FIFOs and sockets, nor entries the sandbox's user may not read. Nothing
// on the way is opened through a link (RESOLVE_NO_SYMLINKS, O_NOFOLLOW).
// Permission bits are kept (without set-id bits), with the owner's write
// bit added: the program owns the copy and may change it.

// FieldError is an error about a job field, which the parent reports as
// an invalid job (see Status.Field).
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Msg }

// copyArea is where the stage keeps the copies (and, with a fresh scratch,
// the scratch) before binding them: a tmpfs at a directory of the root
// tmpfs, detached and removed once everything is bound.
type copyArea struct {
	dir     string
	scratch string // the scratch directory in the area ("": none)
	copies  map[int]string
	limitMB int64
}

// makeCopies copies base's copy grants into a new tmpfs at r/.copies. With
// a fresh scratch (no HasScratch), the tmpfs holds the scratch too. It
// returns nil when the job has no copy grant.
func makeCopies(r string, base *BaseSpec) (*copyArea, error) {
	var any bool
	for _, b := range base.Binds {
		any = any || b.Copy
	}
	if !any {
		return nil, nil
	}
	a := &copyArea{dir: path.Join(r, ".copies"), copies: map[int]string{}, limitMB: max(base.ScratchMB, 1)}
	if err := os.Mkdir(a.dir, 0o700); err != nil {
		return nil, err
	}
	if err := unix.Mount("tmpfs", a.dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV,
		ScratchSize(a.limitMB)+",mode=0755"); err != nil {
		return nil, fmt.Errorf("mounting the copies' tmpfs: %w", err)
	}
	if !base.HasScratch {
		a.scratch = path.Join(a.dir, "scratch")
		if err := os.Mkdir(a.scratch, 0o755); err != nil {
			return a, err
		}
	}
	for i, b := range base.Binds {
		if !b.Copy {
			continue
		}
		dst := path.Join(a.dir, "copy-"+strconv.Itoa(i))
		err := copyGrant(b.Fd, dst)
		switch {
		case errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EFBIG):
			return a, &FieldError{Field: "grants.fs.copy", Msg: fmt.Sprintf(
				"the copy at %s does not fit in the scratch (grants.fs.scratch_mb, %d MB)", b.Target, a.limitMB)}
		case err != nil:
			return a, &FieldError{Field: "grants.fs.copy", Msg: fmt.Sprintf("copying the grant at %s: %v", b.Target, err)}
		}
		a.copies[i] = dst
	}
	return a, nil
}

// release detaches the area's own mount (the binds of its directories
// keep the tmpfs) and removes its directory.
func (a *copyArea) release() error {
	if a == nil {
		return nil
	}
	if err := unix.Unmount(a.dir, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detaching the copies' tmpfs: %w", err)
	}
	return os.Remove(a.dir)
}

// bindCopy binds the copy made for b at its target, writable.
func bindCopy(root string, b BindSpec, src string) error {
	defer unix.Close(b.Fd)
	target := path.Join(root, b.Target)
	if err := mountPoint(target, b.Dir); err != nil {
		return fmt.Errorf("copying to %s: %w", b.Target, err)
	}
	if err := unix.Mount(src, target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("copying to %s: %w", b.Target, err)
	}
	return nil
}

// resolveHere opens name beneath dir, never through a link.
const resolveHere = unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS

func openBeneath(dir int, name string, flags int) (int, error) {
	return unix.Openat2(dir, name, &unix.OpenHow{
		Flags:   uint64(flags | unix.O_CLOEXEC | unix.O_NOFOLLOW | unix.O_NONBLOCK),
		Resolve: resolveHere,
	})
}

// copyGrant copies the tree at the descriptor src (a detached mount of a
// directory or a regular file) to dst, which must not exist.
func copyGrant(src int, dst string) error {
	// The mount's root itself: through the descriptor's own magic link,
	// which names the detached mount, not a path that could be replaced.
	fd, err := unix.Open(FdPath(src), unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	parent, err := unix.Open(path.Dir(dst), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer unix.Close(parent)
	return copyOpened(fd, &st, parent, path.Base(dst))
}

// copyOpened makes name, in the directory out, a copy of the open file in
// (st its status): a directory with its entries, or a regular file, with
// its permission bits (and the owner's write bit: the copy is the job's to
// change).
func copyOpened(in int, st *unix.Stat_t, out int, name string) error {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		if err := unix.Mkdirat(out, name, 0o700); err != nil {
			return err
		}
		sub, err := openBeneath(out, name, unix.O_RDONLY|unix.O_DIRECTORY)
		if err != nil {
			return err
		}
		defer unix.Close(sub)
		if err := unix.Fchmod(sub, dirMode(st.Mode)); err != nil {
			return err
		}
		return copyDir(in, sub)
	case unix.S_IFREG:
		w, err := unix.Openat2(out, name, &unix.OpenHow{
			Flags:   unix.O_WRONLY | unix.O_CREAT | unix.O_EXCL | unix.O_CLOEXEC | unix.O_NOFOLLOW,
			Mode:    0o600,
			Resolve: resolveHere,
		})
		if err != nil {
			return err
		}
		defer unix.Close(w)
		if err := unix.Fchmod(w, fileMode(st.Mode)); err != nil {
			return err
		}
		return copyData(in, w)
	}
	return errors.New("neither a directory nor a regular file")
}

func dirMode(m uint32) uint32  { return m&0o777 | 0o700 }
func fileMode(m uint32) uint32 { return m&0o777 | 0o200 }

// copyDir copies the entries of the directory in to the directory out.
func copyDir(in, out int) error {
	// A descriptor of its own for the listing: reading entries moves its
	// offset.
	lfd, err := openBeneath(in, ".", unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return err
	}
	list := os.NewFile(uintptr(lfd), "grant")
	defer list.Close()
	for {
		names, err := list.Readdirnames(256)
		for _, name := range names {
			if err := copyEntry(in, out, name); err != nil {
				return err
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// copyEntry copies the entry name of the directory in to out: a regular
// file or a directory (recursively); anything else, and what the
// sandbox's user may not read, is left out.
func copyEntry(in, out int, name string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(in, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil // gone meanwhile
		}
		return err
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		sub, err := openBeneath(in, name, unix.O_RDONLY|unix.O_DIRECTORY)
		if skipped(err) {
			return nil
		} else if err != nil {
			return err
		}
		defer unix.Close(sub)
		return copyOpened(sub, &st, out, name)
	case unix.S_IFREG:
		f, err := openBeneath(in, name, unix.O_RDONLY)
		if skipped(err) {
			return nil
		} else if err != nil {
			return err
		}
		defer unix.Close(f)
		// Checked on the descriptor: what was opened is a regular file
		// (the entry could have been replaced since the stat).
		if err := unix.Fstat(f, &st); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			return nil
		}
		return copyOpened(f, &st, out, name)
	}
	return nil // links, devices, FIFOs, sockets
}

// skipped reports whether an open failed because the entry is not the
// sandbox's to read (or went away, or became a link, meanwhile).
func skipped(err error) bool {
	return errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.ENOENT) ||
		errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.EXDEV)
}

// copyData copies the file in to out.
func copyData(in, out int) error {
	buf := make([]byte, 128<<10)
	for {
		n, err := unix.Read(in, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		for b := buf[:n]; len(b) > 0; {
			m, err := unix.Write(out, b)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return err
			}
			b = b[m:]
		}
	}
}
