// Package lease tells a live owner's state on the host from a dead one's,
// so that a sweep removes what crashed owners left behind and never what
// a live one uses.
//
// An owner is a lock file in a directory of owners, named
// "<prefix><pid>-<random>" and created exclusively, so the name is unique
// in the directory. The owner is alive while it holds an flock on that
// file. The kernel releases an flock when the last descriptor of it is
// closed, so when the owning process dies, however it dies; the file is
// opened close-on-exec, so no child holds it. A sweep takes the lock of
// every other owner it can (a live owner's it cannot), removes that
// owner's state, and then the lock file, still holding the lock, so that
// two sweeps never work on the same owner at once. What it cannot remove
// keeps the lock file in place for a later sweep. The PID in the name is
// only for people reading it: liveness does not depend on it, so neither a
// reused PID nor a PID namespace that hides the owner misleads a sweep.
package lease

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// randomBytes is the random part of an owner's name, in bytes.
const randomBytes = 4

// Owner is a held lease: its lock file stays locked until Release.
type Owner struct {
	name string
	f    *os.File
	once sync.Once
}

// Own creates a lock file in dir under a new owner name that starts with
// prefix and pid (normally os.Getpid(), only for people reading the name),
// and locks it.
func Own(dir, prefix string, pid int) (*Owner, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	for range 16 {
		var b [randomBytes]byte
		_, _ = rand.Read(b[:])
		name := prefix + strconv.Itoa(pid) + "-" + hex.EncodeToString(b[:])
		path := filepath.Join(dir, name)
		f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if errors.Is(err, os.ErrNotExist) {
			// A sweep removed the directory while it was empty (see Tidy).
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("creating lock file: %w", err)
		}
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case errors.Is(err, syscall.EWOULDBLOCK):
			// A sweep took the new file for a dead owner's between the open
			// and the lock; it removes the file. Try another name.
			f.Close()
			continue
		case err != nil:
			f.Close()
			os.Remove(path)
			return nil, fmt.Errorf("locking %s: %w", path, err)
		case !samePath(f, path):
			// A sweep took it and removed it before the lock: the lock is on
			// a file nobody else can see.
			f.Close()
			continue
		}
		return &Owner{name: name, f: f}, nil
	}
	return nil, fmt.Errorf("no free owner name in %s", dir)
}

// Name is the owner's name; the owner's state carries it.
func (o *Owner) Name() string { return o.name }

// Path is the owner's lock file.
func (o *Owner) Path() string { return o.f.Name() }

// Release ends the lease: it removes the lock file when remove is set
// (the owner's state is gone; otherwise a later sweep finds it) and
// releases the lock. It is safe to call more than once.
func (o *Owner) Release(remove bool) {
	o.once.Do(func() {
		if remove {
			os.Remove(o.f.Name())
		}
		o.f.Close()
	})
}

var (
	processMu     sync.Mutex
	processOwners = map[string]*Owner{}
)

// ForProcess returns this process's owner in dir, created on first use
// and held for the life of the process: for state whose owner is the
// process rather than an object it may close.
func ForProcess(dir, prefix string) (*Owner, error) {
	processMu.Lock()
	defer processMu.Unlock()
	key := dir + "\x00" + prefix
	if o := processOwners[key]; o != nil {
		return o, nil
	}
	o, err := Own(dir, prefix, os.Getpid())
	if err != nil {
		return nil, err
	}
	processOwners[key] = o
	return o, nil
}

// Lock is a dead owner's lock, held by a sweep.
type Lock struct {
	f *os.File
}

// TakeDead takes the lock of the owner name in dir, which means the owner
// is gone. It returns nil if the lock is held (the owner is alive, or
// another sweep has it) or the file is gone.
func TakeDead(dir, name string) *Lock {
	path := filepath.Join(dir, name)
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil || !samePath(f, path) {
		f.Close()
		return nil
	}
	return &Lock{f: f}
}

// Remove removes the dead owner's lock file, once its state is gone, and
// releases the lock.
func (l *Lock) Remove() {
	os.Remove(l.f.Name())
	l.f.Close()
}

// Keep releases the lock and leaves the lock file for a later sweep:
// something of the owner's state could not be removed.
func (l *Lock) Keep() { l.f.Close() }

// Gone reports whether the owner name has no lock file in dir. An owner's
// lock file exists before its state and outlives it, so state whose owner
// has none is a dead owner's whose lock a sweep has removed.
func Gone(dir, name string) bool {
	_, err := os.Lstat(filepath.Join(dir, name))
	return errors.Is(err, os.ErrNotExist)
}

// Owners lists the names in dir that have the form of an owner's name
// with prefix.
func Owners(dir, prefix string) []string {
	entries, _ := os.ReadDir(dir)
	var out []string
	for _, e := range entries {
		if IsName(prefix, e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out
}

// Tidy removes dir if it holds no lock file, so that a sweep leaves
// nothing behind; Own makes it again.
func Tidy(dir string) { os.Remove(dir) }

// IsName reports whether name has the form of an owner's name with
// prefix.
func IsName(prefix, name string) bool {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return false
	}
	pid, random, ok := strings.Cut(rest, "-")
	return ok && isDecimal(pid) && len(random) == 2*randomBytes && isHex(random)
}

// OwnerOf returns the owner's name that starts name, "<owner>-<rest>",
// or "" when name does not start with one.
func OwnerOf(prefix, name string) string {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return ""
	}
	pid, rest, ok := strings.Cut(rest, "-")
	if !ok || len(rest) <= 2*randomBytes || rest[2*randomBytes] != '-' {
		return ""
	}
	owner := prefix + pid + "-" + rest[:2*randomBytes]
	if !IsName(prefix, owner) {
		return ""
	}
	return owner
}

// samePath reports whether path still names the open file f.
func samePath(f *os.File, path string) bool {
	a, err1 := f.Stat()
	b, err2 := os.Stat(path)
	return err1 == nil && err2 == nil && os.SameFile(a, b)
}

func isDecimal(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}

func isHex(s string) bool {
	return s != "" && strings.Trim(s, "0123456789abcdef") == ""
}
