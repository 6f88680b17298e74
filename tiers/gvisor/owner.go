package gvisor

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/airlock-sandbox/airlock/tiers/internal/lease"
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
//	roots/shared-<digest>/  a read-only sandbox root, shared (see root.go)
//	roots/<owner>/  that tier's own: a root being built, a dynamically
//	                linked agent's libraries
//	sb/<id>/        one directory per sandbox
//
// Every tier is an owner named "airlock-gv-<pid>-<random>", unique in the
// directory because its lock file is created exclusively. Its sandboxes,
// their directories and cgroups are named "<owner>-<n>.sb" (see idEnd: no
// id is a prefix of another, which runsc needs). The PID is decimal and
// the random part of fixed length, each followed by "-", so no owner's
// name or ids extend another owner's.
//
// No tier writes anything another tier uses. A sandbox root is built once,
// in a new directory, and never written again: a root rebuilt in place
// under a running sandbox can pull a mapped file from under the sandbox's
// processes, which then die of SIGBUS. Tiers that would build the same
// root share it (root.go).
//
// A tier is alive while it holds the lease of its lock file (see package
// lease): a sweep removes a dead owner's sandboxes, sandbox directories,
// cgroups and own directory, and then its lock file; and the shared roots
// no live tier holds, but its own. The PID in the name is only
// for people reading `runsc list`. Sandboxes named in the
// form of earlier versions ("airlock-gv-<pid>-<hex>", no lock) are still
// judged by their PID; the shared root those versions kept in <dir>/rootfs
// is left alone. Ids of the version before idEnd ("<owner>-<n>") belong to
// their owner like current ones; some are prefixes of others, so a sweep
// deletes the longest first.

// legacyIDHex is the length of the random part of earlier versions' ids.
const legacyIDHex = 12

// getpid is os.Getpid; tests replace it to name a tier after a PID that
// looks dead, as a tier in another PID namespace would.
var getpid = os.Getpid

// own takes a lease on a new owner name in the directory (see lease).
func (t *Tier) own() error {
	o, err := lease.Own(filepath.Join(t.base, "owners"), idPrefix, getpid())
	if err != nil {
		return err
	}
	t.owner, t.lease = o.Name(), o
	return nil
}

// ownDir is the tier's own directory among the roots: where it builds a
// shared root, and keeps a dynamically linked agent's libraries. It need
// not exist.
func (t *Tier) ownDir() string { return filepath.Join(t.base, "roots", t.owner) }

// disown gives up the tier's ownership once nothing of it runs any more:
// it removes the tier's own directory and lock file, releases the lock,
// and lets go of the shared root. It is safe to call more than once.
func (t *Tier) disown() {
	t.disownOnce.Do(func() {
		if t.rootLock != nil {
			t.rootLock.Close()
		}
		if t.lease == nil {
			return
		}
		err := os.RemoveAll(t.ownDir())
		if err != nil {
			logf("removing the tier's directory: %v", err) // the lock file stays for a later sweep
		}
		t.lease.Release(err == nil)
	})
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
	case len(parts) == 3 && lease.IsName(idPrefix, idPrefix+parts[0]+"-"+parts[1]) && isDecimal(strings.TrimSuffix(parts[2], idEnd)):
		return idPrefix + parts[0] + "-" + parts[1], 0
	case len(parts) == 2 && len(parts[1]) == legacyIDHex && isHex(parts[1]):
		return "", pid
	}
	return "", 0
}

func isDecimal(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}

func isHex(s string) bool {
	return strings.Trim(s, "0123456789abcdef") == ""
}
