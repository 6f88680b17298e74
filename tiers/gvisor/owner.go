package gvisor

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Sharing the directory.
//
// Any number of tiers, in one process or in several, may use the same
// directory (by default every airlock process on the machine does). It
// holds:
//
//	state/          runsc's --root: one entry per sandbox, which runsc locks
//	                itself; sandbox ids are unique, so tiers never collide
//	empty/          an empty directory, never written after it is made
//	owners/<owner>  one lock file per tier, locked (flock) for the tier's life
//	roots/<owner>/  that tier's read-only sandbox root
//	sb/<id>/        one directory per sandbox
//
// Every tier is an owner named "airlock-gv-<pid>-<random>", unique in the
// directory because its lock file is created exclusively. Its sandboxes,
// their directories and cgroups are named "<owner>-<n>.sb" (see idEnd: no
// id is a prefix of another, which runsc needs). The PID is decimal and
// the random part of fixed length, each followed by "-", so no owner's
// name or ids extend another owner's.
//
// No tier writes anything another tier uses. Each builds its own root,
// once, in a new directory, and never writes it again: a root rebuilt in
// place under a running sandbox can pull a mapped file from under the
// sandbox's processes, which then die of SIGBUS. A root is small (empty
// mount points and a few files in /etc), so one per tier costs little.
//
// A tier is alive while its lock is held. The kernel releases an flock
// when the last descriptor of it is closed, so when the owning process
// dies, however it dies; the lock file is opened close-on-exec, so no
// sandbox or runsc process holds it. A sweep takes the lock of every other
// owner it can (a live owner's it cannot), removes that owner's sandboxes,
// sandbox directories, cgroups and root, and then the lock file, still
// holding the lock, so that two sweeps never work on the same owner at
// once. What it cannot remove keeps the lock file in place for a later
// sweep. The PID in the name is only for people reading `runsc list`:
// liveness does not depend on it, so neither a reused PID nor a PID
// namespace that hides the owner misleads a sweep. Sandboxes named in the
// form of earlier versions ("airlock-gv-<pid>-<hex>", no lock) are still
// judged by their PID; the shared root those versions kept in <dir>/rootfs
// is left alone. Ids of the version before idEnd ("<owner>-<n>") belong to
// their owner like current ones; some are prefixes of others, so a sweep
// deletes the longest first.

// ownerNameBytes is the random part of an owner's name, in bytes.
const ownerNameBytes = 4

// legacyIDHex is the length of the random part of earlier versions' ids.
const legacyIDHex = 12

// getpid is os.Getpid; tests replace it to name a tier after a PID that
// looks dead, as a tier in another PID namespace would.
var getpid = os.Getpid

// own creates the tier's lock file under a new owner name and locks it.
func (t *Tier) own() error {
	dir := filepath.Join(t.base, "owners")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for range 16 {
		var b [ownerNameBytes]byte
		_, _ = rand.Read(b[:])
		name := idPrefix + strconv.Itoa(getpid()) + "-" + hex.EncodeToString(b[:])
		path := filepath.Join(dir, name)
		f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("creating lock file: %w", err)
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
			return fmt.Errorf("locking %s: %w", path, err)
		case !samePath(f, path):
			// A sweep took it and removed it before the lock: the lock is on
			// a file nobody else can see.
			f.Close()
			continue
		}
		t.owner, t.lock = name, f
		return nil
	}
	return fmt.Errorf("no free owner name in %s", dir)
}

// disown gives up the tier's ownership once nothing of it runs any more:
// it removes the tier's root and lock file and releases the lock. It is
// safe to call more than once.
func (t *Tier) disown() {
	t.disownOnce.Do(func() {
		if t.lock == nil {
			return
		}
		if err := os.RemoveAll(t.rootfs); err != nil {
			logf("removing the sandbox root: %v", err) // the lock file stays for a later sweep
		} else {
			os.Remove(t.lock.Name())
		}
		t.lock.Close()
	})
}

// lockDead takes the lock of the owner whose lock file is path, which
// means the owner is gone. It returns nil if the lock is held (the owner
// is alive, or another sweep has it) or the file is gone.
func lockDead(path string) *os.File {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil || !samePath(f, path) {
		f.Close()
		return nil
	}
	return f
}

// samePath reports whether path still names the open file f.
func samePath(f *os.File, path string) bool {
	a, err1 := f.Stat()
	b, err2 := os.Stat(path)
	return err1 == nil && err2 == nil && os.SameFile(a, b)
}

// parseID splits a sandbox id. For "airlock-gv-<pid>-<random>-<n>.sb"
// (or "…-<n>", as the previous version named them) it returns the owner's
// name; for an id of an earlier version, "airlock-gv-<pid>-<hex>", the PID;
// for anything else neither.
func parseID(id string) (owner string, legacyPID int) {
	rest, ok := strings.CutPrefix(id, idPrefix)
	if !ok {
		return "", 0
	}
	parts := strings.Split(rest, "-")
	pid, err := strconv.Atoi(parts[0])
	if err != nil || pid <= 0 {
		return "", 0
	}
	switch {
	case len(parts) == 3 && isOwnerName(idPrefix+parts[0]+"-"+parts[1]) && isDecimal(strings.TrimSuffix(parts[2], idEnd)):
		return idPrefix + parts[0] + "-" + parts[1], 0
	case len(parts) == 2 && len(parts[1]) == legacyIDHex && isHex(parts[1]):
		return "", pid
	}
	return "", 0
}

// isOwnerName reports whether name has the form of an owner's name.
func isOwnerName(name string) bool {
	rest, ok := strings.CutPrefix(name, idPrefix)
	if !ok {
		return false
	}
	pid, random, ok := strings.Cut(rest, "-")
	return ok && pid != "" && isDecimal(pid) && len(random) == 2*ownerNameBytes && isHex(random)
}

func isDecimal(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}

func isHex(s string) bool {
	return strings.Trim(s, "0123456789abcdef") == ""
}
