// Package statedir makes the directories where airlock keeps state
// (sandbox roots, runsc's state, scratch directories, VM state, images)
// and refuses one that someone else could have prepared or could change;
// it checks the files and tools directories airlock trusts the same way.
//
// The defaults live in the system's temporary directory, which every user
// may write. A local user who made /tmp/airlock-gvisor before airlock did,
// or made a directory on the way to one writable, would decide what a
// root-run airlock reads and writes there: a link in place of a sandbox
// directory sends the job's files, written as root, anywhere on the host.
// So a state directory, and every directory above it, must belong to root
// or to this user and be writable by no one else; above it, a directory
// that everyone may write is accepted only with the sticky bit (as /tmp
// has), which keeps others from renaming or removing what is not theirs.
package statedir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
)

// Error is a state directory, or a trusted file, refused, with the reason.
type Error struct {
	// What Dir is, for the message ("": a state directory); File says
	// "file", and a caller may name it better ("tools directory").
	What   string
	Dir    string // the state directory (or file) asked for
	Path   string // the one at fault: Dir or a directory above it
	Reason string
}

func (e *Error) Error() string {
	what := e.What
	if what == "" {
		what = "state directory"
	}
	if e.Path == e.Dir {
		return fmt.Sprintf("%s %s %s: refused", what, e.Dir, e.Reason)
	}
	return fmt.Sprintf("%s %s: %s %s: refused", what, e.Dir, e.Path, e.Reason)
}

// Ensure makes dir, and the directories above it that are missing, with
// mode perm, and returns dir's real path (without links). Walking down
// from /, it checks each directory before it makes or uses anything below
// it: each must belong to root or this user (dir itself: to this user)
// and be writable by no one else (above dir, a directory everyone may
// write is accepted with the sticky bit); a link on the way must belong to
// root or this user and lead to a directory that passes the same checks;
// dir itself must not be a link. perm must not let group or others write.
func Ensure(dir string, perm os.FileMode) (string, error) {
	if perm&0o022 != 0 {
		return "", fmt.Errorf("state directory %s: mode %v lets others write", dir, perm)
	}
	if !filepath.IsAbs(dir) {
		return "", fmt.Errorf("state directory %q: not an absolute path", dir)
	}
	dir = filepath.Clean(dir)
	path := ancestors(dir)
	for i := len(path) - 1; i >= 0; i-- {
		if err := step(dir, path[i], i == 0, perm, true); err != nil {
			return "", err
		}
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", fmt.Errorf("state directory: %w", err)
	}
	return real, Check(dir, real)
}

// Resolve checks an existing directory dir that airlock trusts (a tools
// directory it found, say) as Ensure checks a state directory, but makes
// nothing and lets dir itself be a link of root's or this user's; it
// returns dir's real path, which is what the caller must use from then
// on: a name that passes through a link can be pointed elsewhere later
// by the link's owner.
func Resolve(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	path := ancestors(dir)
	for i := len(path) - 1; i >= 0; i-- {
		if err := step(dir, path[i], false, 0, false); err != nil {
			return "", err
		}
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", err
	}
	return real, Check(dir, real)
}

// ancestors returns dir and every directory above it, up to /.
func ancestors(dir string) []string {
	var path []string
	for p := dir; ; p = filepath.Dir(p) {
		path = append(path, p)
		if p == filepath.Dir(p) {
			return path
		}
	}
}

// step checks p, one directory on the way to the state directory dir (or
// dir itself: last), whose parent step has checked, and, with mk, makes
// it with mode perm when it is missing. The directories made get perm whatever
// the umask: a sandbox's user may need to pass through them.
func step(dir, p string, last bool, perm os.FileMode, mk bool) error {
	st, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) && mk {
		// Mkdir follows no link at p: one made meanwhile fails it.
		if err = os.Mkdir(p, perm); err == nil {
			err = os.Chmod(p, perm)
		}
		if err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("state directory: %w", err)
		}
		st, err = os.Lstat(p)
	}
	if err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	if !checked {
		return nil
	}
	euid := uint32(os.Geteuid())
	uid, ok := owner(st)
	switch {
	case !ok:
		return &Error{Dir: dir, Path: p, Reason: "has no owner this system reports"}
	case st.Mode()&os.ModeSymlink != 0 && last:
		return &Error{Dir: dir, Path: p, Reason: fmt.Sprintf("is a symbolic link (of uid %d)", uid)}
	case st.Mode()&os.ModeSymlink != 0 && !trustedUID(uid, euid):
		return &Error{Dir: dir, Path: p, Reason: fmt.Sprintf("is a symbolic link of uid %d, neither root nor this user (uid %d)", uid, euid)}
	case st.Mode()&os.ModeSymlink != 0:
		// A link of root's (/var/run to /run, say): where it leads is
		// checked as any directory on the way.
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			return fmt.Errorf("state directory %s: %w", dir, err)
		}
		if err := check(dir, real, false); err != nil {
			return err
		}
		return nil
	case !st.IsDir():
		return &Error{Dir: dir, Path: p, Reason: "is not a directory"}
	case last && uid != euid && !sudoUID(uid, euid):
		return &Error{Dir: dir, Path: p, Reason: fmt.Sprintf("belongs to uid %d, not this user (uid %d)", uid, euid)}
	case !trustedUID(uid, euid):
		return &Error{Dir: dir, Path: p, Reason: foreign(uid, euid)}
	case st.Mode().Perm()&0o022 != 0 && (last || st.Mode()&os.ModeSticky == 0):
		return &Error{Dir: dir, Path: p, Reason: fmt.Sprintf("is writable by others (mode %v)", st.Mode().Perm())}
	}
	return nil
}

// Check checks real, the real path of the state directory dir, and every
// directory above it (see the package's comment).
func Check(dir, real string) error {
	return check(dir, real, true)
}

// check is Check; own says whether real is the state directory itself,
// which may not be writable by others even with the sticky bit.
func check(dir, real string, own bool) error {
	if !checked {
		return nil
	}
	euid := uint32(os.Geteuid())
	for p := real; ; p, own = filepath.Dir(p), false {
		st, err := os.Lstat(p)
		if err != nil {
			return fmt.Errorf("state directory %s: %w", dir, err)
		}
		uid, ok := owner(st)
		switch {
		case !ok:
			return &Error{Dir: dir, Path: p, Reason: "has no owner this system reports"}
		case !st.IsDir():
			return &Error{Dir: dir, Path: p, Reason: "is not a directory"}
		case !trustedUID(uid, euid):
			return &Error{Dir: dir, Path: p, Reason: foreign(uid, euid)}
		case st.Mode().Perm()&0o022 != 0 && (own || st.Mode()&os.ModeSticky == 0):
			return &Error{Dir: dir, Path: p, Reason: fmt.Sprintf("is writable by others (mode %v)", st.Mode().Perm())}
		}
		if p == "/" || p == filepath.Dir(p) {
			return nil
		}
	}
}

// File checks a file whose content decides what airlock trusts (an
// account's record, say) as Check checks a state directory: the file must
// be a regular file that belongs to root or this user and that nobody
// else may write, in a directory that passes Check, and the name it is
// reached by may pass through no link of another user's (see Resolve).
func File(path string) error {
	if !checked {
		return nil
	}
	// The name as it is used later must lead to the same file: every
	// link on the way, and the file's own, must be root's or this
	// user's, in directories that pass.
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	if _, err := Resolve(filepath.Dir(abs)); err != nil {
		var e *Error
		if errors.As(err, &e) {
			e.Dir, e.What = path, "file"
		}
		return err
	}
	if st, err := os.Lstat(abs); err == nil && st.Mode()&os.ModeSymlink != 0 {
		if uid, ok := Owner(st); !ok {
			return &Error{Dir: path, Path: abs, Reason: fmt.Sprintf("is a symbolic link of uid %d, neither root nor this user (uid %d)", uid, os.Geteuid()), What: "file"}
		}
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return err
	}
	st, err := os.Lstat(real)
	if err != nil {
		return err
	}
	uid, ok := Owner(st)
	switch {
	case !st.Mode().IsRegular():
		return &Error{Dir: path, Path: real, Reason: "is not a regular file", What: "file"}
	case !ok:
		return &Error{Dir: path, Path: real, Reason: foreign(uid, uint32(os.Geteuid())), What: "file"}
	case st.Mode().Perm()&0o022 != 0:
		return &Error{Dir: path, Path: real, Reason: fmt.Sprintf("is writable by others (mode %v)", st.Mode().Perm()), What: "file"}
	}
	if err := Check(filepath.Dir(path), filepath.Dir(real)); err != nil {
		var e *Error
		if errors.As(err, &e) {
			e.Dir, e.What = path, "file"
		}
		return err
	}
	return nil
}

// Owner returns the uid that owns the file st describes and whether it
// may own what airlock trusts (see trustedUID). On systems without owners
// every file passes.
func Owner(st os.FileInfo) (uid uint32, trusted bool) {
	if !checked {
		return 0, true
	}
	uid, ok := owner(st)
	return uid, ok && trustedUID(uid, uint32(os.Geteuid()))
}

// trustedUID reports whether uid may own what airlock trusts: root, this
// user, or, for root run through sudo, the user who ran sudo (SUDO_UID),
// who could run anything as root anyway; so `sudo airlock` works in that
// user's checkout, as `sudo git` does.
func trustedUID(uid, euid uint32) bool {
	return uid == 0 || uid == euid || sudoUID(uid, euid)
}

// sudoUID reports whether this process is root run through sudo by uid.
func sudoUID(uid, euid uint32) bool {
	if euid != 0 {
		return false
	}
	s, err := strconv.ParseUint(os.Getenv("SUDO_UID"), 10, 32)
	return err == nil && uint32(s) == uid
}

func foreign(uid, euid uint32) string {
	return fmt.Sprintf("belongs to uid %d, neither root nor this user (uid %d)", uid, euid)
}

// Usable is Ensure for a cache that can do without its directory: it
// reports whether dir may be used.
func Usable(dir string, perm os.FileMode) bool {
	_, err := Ensure(dir, perm)
	return err == nil
}

// As names what err (a refusal by Check or File) is about, for its
// message; other errors are returned as they are.
func As(err error, what string) error {
	var e *Error
	if errors.As(err, &e) {
		e.What = what
	}
	return err
}

// IsRefused reports whether err is a state directory refused by Ensure.
func IsRefused(err error) bool {
	var e *Error
	return errors.As(err, &e)
}

// Makeable reports whether dir exists or could be made by this process:
// its nearest existing ancestor is a directory this process may write
// in. It makes nothing, so a default can be chosen without a side effect
// (a user whose home does not exist gets another one).
func Makeable(dir string) bool {
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err == nil {
			return st.IsDir() && writable(d)
		}
		if !errors.Is(err, fs.ErrNotExist) || filepath.Dir(d) == d {
			return false
		}
	}
}
