package account

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// The account's directories (DIR/NAME and DIR/NAME.run) belong to its
// user, who may have left links, pipes or hard links in them; root still
// writes there (`account add`, `set`, `start`, `renew`). Every such path
// is resolved inside its directory (os.Root: a link that leads out of it
// is refused), a file root writes is made anew under a name of its own
// and renamed into place, and modes and owners are set through the open
// descriptor, never by name. Root so never writes, reads, chmods or
// chowns a file outside the account's directories on the user's say.

// maxOwnFile bounds what root reads from the account's directories.
const maxOwnFile = 16 << 20

// openOwn opens dir (one of the account's directories) as a root that
// keeps every path inside it.
func openOwn(dir string) (*os.Root, error) {
	return os.OpenRoot(dir)
}

// writeOwn writes data as name inside root with mode, owned by uid and
// gid: a new file, renamed over name, so a link or a file of the user's
// at name (or at any other name) is replaced, never written through.
func writeOwn(root *os.Root, name string, data []byte, mode os.FileMode, uid, gid int) error {
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return err
	}
	tmp := name + "." + hex.EncodeToString(rnd[:]) + ".tmp"
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(mode)
	}
	if err == nil {
		err = f.Chown(uid, gid)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Rename(tmp, name)
	}
	if err != nil {
		_ = root.Remove(tmp)
	}
	return err
}

// readOwn reads name inside root without following a link at name: a
// regular file of at most maxOwnFile bytes, else an error. With owner
// >= 0, a file another uid owns is refused too.
func readOwn(root *os.Root, name string, owner int) ([]byte, error) {
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, linkRefused(root, name, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if err := ownRegular(root.Name()+"/"+name, st, owner); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, maxOwnFile+1))
	if err == nil && len(data) > maxOwnFile {
		err = fmt.Errorf("%s/%s is larger than %d bytes: refused", root.Name(), name, maxOwnFile)
	}
	return data, err
}

// linkRefused names a link at name (or on the way to it) as the reason
// err is, or returns err.
func linkRefused(root *os.Root, name string, err error) error {
	p := "."
	for _, part := range strings.Split(filepath.Clean(name), "/") {
		p = filepath.Join(p, part)
		if st, lerr := root.Lstat(p); lerr == nil && st.Mode()&os.ModeSymlink != 0 {
			return fmt.Errorf("%s is a symbolic link (its user's, where root writes): refused", filepath.Join(root.Name(), p))
		}
	}
	return err
}

// ownRegular refuses what is not a regular file with one link, or, with
// owner >= 0, one another uid owns.
func ownRegular(path string, st fs.FileInfo, owner int) error {
	sys, _ := st.Sys().(*syscall.Stat_t)
	switch {
	case !st.Mode().IsRegular():
		return fmt.Errorf("%s is not a regular file: refused", path)
	case sys == nil || sys.Nlink != 1:
		return fmt.Errorf("%s has other hard links: refused", path)
	case owner >= 0 && int(sys.Uid) != owner:
		return fmt.Errorf("%s is owned by uid %d, not %d: refused", path, sys.Uid, owner)
	}
	return nil
}

// dirOwn makes the directory name inside root if it is missing and
// gives it mode, uid and gid through its descriptor; a link or a file at
// name is refused.
func dirOwn(root *os.Root, name string, mode os.FileMode, uid, gid int) error {
	if err := root.Mkdir(name, mode); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_DIRECTORY, 0)
	if err != nil {
		return linkRefused(root, name, err)
	}
	defer f.Close()
	if err := f.Chmod(mode); err != nil {
		return err
	}
	return f.Chown(uid, gid)
}

// OpenLog opens the executor's log in the account's directory for
// appending, made if missing and owned by the account: a link, a pipe or
// a file with other hard links there is refused, so root, who opens it,
// never hands the account another file.
func (r Record) OpenLog() (*os.File, error) {
	root, err := openOwn(r.Home())
	if err != nil {
		return nil, err
	}
	defer root.Close()
	f, err := root.OpenFile("executor.log", os.O_WRONLY|os.O_CREATE|os.O_APPEND|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o600)
	if err != nil {
		return nil, fmt.Errorf("the executor's log: %w", linkRefused(root, "executor.log", err))
	}
	st, err := f.Stat()
	if err == nil {
		err = ownRegular(f.Name(), st, -1)
	}
	if err == nil {
		err = f.Chown(r.UID, r.GID)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// PidFile is where `account start` records the executor's pid, where no
// systemd runs.
const PidFile = "executor.pid"

// WritePid records the executor's pid in its socket's directory.
func (r Record) WritePid(pid int) error {
	root, err := openOwn(r.RunDir())
	if err != nil {
		return err
	}
	defer root.Close()
	return writeOwn(root, PidFile, fmt.Appendf(nil, "%d\n", pid), 0o644, 0, 0)
}

// ReadPid reads the pid WritePid recorded.
func (r Record) ReadPid() (string, error) {
	root, err := openOwn(r.RunDir())
	if err != nil {
		return "", err
	}
	defer root.Close()
	data, err := readOwn(root, PidFile, -1)
	return string(data), err
}

// RemovePid removes the pid file.
func (r Record) RemovePid() {
	if root, err := openOwn(r.RunDir()); err == nil {
		_ = root.Remove(PidFile)
		root.Close()
	}
}

// ReadLog reads the executor's log (as OpenLog, not through a link).
func (r Record) ReadLog() ([]byte, error) {
	root, err := openOwn(r.Home())
	if err != nil {
		return nil, err
	}
	defer root.Close()
	return readOwn(root, "executor.log", r.UID)
}

// NoCoreDumps sets the executor's core size limit, hard and soft, to
// zero: the executor holds the values it resolves, and the VMs it starts
// (which inherit the limit) the jobs' memory, credentials included; a
// crash must not write them to a core file, nor hand them to a crash
// handler, which honours the limit.
func NoCoreDumps() error {
	return unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{Cur: 0, Max: 0})
}
