package gvisor

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/tiers/internal/lease"
)

// alive reports whether a process with the given PID exists.
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// Sweep removes what tiers that are gone (their process crashed or exited
// without Close) left in the tier's directory and the cgroup hierarchies
// (New already sweeps once) and returns how many items it removed. It
// never touches what belongs to a live tier (see owner.go).
func (t *Tier) Sweep() int {
	if t.avail != nil {
		return 0
	}
	return t.sweep()
}

// sweep removes what dead owners left behind: runsc sandboxes (killed and
// deleted), sandbox directories, cgroups and own directories, and finally
// the owners' lock files; and the shared roots no live tier holds. An owner is dead when its lock can be taken, or,
// for a sandbox or directory in this tier's directory, when its lock file
// is gone (a live owner's exists before its first sandbox and outlives
// its last). Cgroups are shared by every directory, so only those of
// owners whose lock this sweep holds are removed.
//
// Ids of earlier versions carry no owner: they are judged by PID, and a
// PID reused by an unrelated process hides them until it exits (see
// docs).
func (t *Tier) sweep() (removed int) {
	owners := filepath.Join(t.base, "owners")
	dead := map[string]*lease.Lock{} // owner -> its lock, held until the end
	failed := map[string]bool{}      // dead owners something of which could not be removed
	defer func() {
		for owner, lock := range dead {
			if !failed[owner] {
				if err := os.RemoveAll(filepath.Join(t.base, "roots", owner)); err != nil {
					logf("sweep: %v", err)
				} else {
					lock.Remove()
					removed++
					continue
				}
			}
			lock.Keep()
		}
	}()
	for _, name := range lease.Owners(owners, idPrefix) {
		if name != t.owner {
			if lock := lease.TakeDead(owners, name); lock != nil {
				dead[name] = lock
			}
		}
	}
	// here reports whether something of this directory named id is a dead
	// owner's.
	here := func(id string) bool {
		owner, pid := parseID(id)
		switch {
		case pid > 0:
			return pid != os.Getpid() && !alive(pid)
		case owner == "" || owner == t.owner:
			return false
		case dead[owner] != nil:
			return true
		}
		return lease.Gone(owners, owner)
	}
	fail := func(id string) {
		if owner, _ := parseID(id); owner != "" {
			failed[owner] = true
		}
	}

	// runsc's list costs about as much as a sandbox's boot; its state
	// directory already names every sandbox it keeps, so the list is asked
	// for only when a name there may be a dead owner's.
	if t.stateMayHold(here) {
		out, err := t.runscOut(context.Background(), "list", "--format", "json")
		if err != nil {
			// Without the list, dead owners' sandboxes may still run:
			// their lock files stay for a later sweep.
			for owner := range dead {
				failed[owner] = true
			}
		} else {
			var list []struct {
				ID string `json:"id"`
			}
			if json.Unmarshal(out, &list) == nil {
				var ids []string
				listed := map[string]bool{}
				for _, c := range list {
					listed[c.ID] = true
					if here(c.ID) {
						ids = append(ids, c.ID)
					}
				}
				for _, id := range deleteOrder(ids) {
					if err := t.destroy(id, "", true); err != nil {
						logf("sweep: %v", err)
						fail(id)
					}
					removed++
				}
				removed += t.removeStateDebris(here, listed)
			}
		}
	}
	removed += sweepRoots(filepath.Join(t.base, "roots"), t.rootfs, t.ownDir())
	sbs, _ := os.ReadDir(filepath.Join(t.base, "sb"))
	for _, e := range sbs {
		if here(e.Name()) {
			if err := os.RemoveAll(filepath.Join(t.base, "sb", e.Name())); err != nil {
				logf("sweep: %v", err)
				fail(e.Name())
			}
			removed++
		}
	}
	hier, _ := os.ReadDir(cgroupRoot)
	for _, h := range hier {
		groups, _ := os.ReadDir(filepath.Join(cgroupRoot, h.Name()))
		for _, g := range groups {
			if !g.IsDir() {
				continue
			}
			owner, pid := parseID(g.Name())
			if (pid > 0 && pid != os.Getpid() && !alive(pid)) || dead[owner] != nil {
				// The sandboxes of dead owners were destroyed above, but
				// their last processes may still be exiting: a busy cgroup
				// gets a short while to empty. A legacy cgroup that keeps
				// its tasks belongs to a sandbox of another state
				// directory, which this sweep cannot kill.
				if removeCgroup(filepath.Join(cgroupRoot, h.Name(), g.Name())) == nil {
					removed++
				} else {
					fail(g.Name())
				}
			}
		}
	}
	return removed
}

// removeCgroup removes an empty cgroup, retrying for up to a second while
// it is busy.
func removeCgroup(dir string) error {
	var err error
	for i := 0; i < 50; i++ {
		if err = os.Remove(dir); !errors.Is(err, syscall.EBUSY) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
	return err
}

// deleteOrder sorts ids so that each comes after every id it is a prefix
// of: the longest first. Ids of the version before idEnd ("<owner>-1",
// "<owner>-10") can be prefixes of one another, and runsc refuses an id
// while a longer one it abbreviates exists.
func deleteOrder(ids []string) []string {
	slices.SortStableFunc(ids, func(a, b string) int { return len(b) - len(a) })
	return ids
}

// stateMayHold reports whether runsc's state directory may name a sandbox
// for which here is true: an entry naming one of the tier's ids (a lock
// file "ID_sandbox:ID.lock" or state file, a socket "runsc-ID.sock")
// whose id here claims, one naming an id in a form it does not know, or a
// directory it cannot read. Entries without the tier's prefix are other
// tools' and never swept.
func (t *Tier) stateMayHold(here func(id string) bool) bool {
	entries, err := os.ReadDir(t.state)
	if err != nil {
		return true
	}
	for _, e := range entries {
		name := e.Name()
		if !strings.Contains(name, idPrefix) {
			continue
		}
		id, ok := stateID(name)
		if !ok || here(id) {
			return true
		}
	}
	return false
}

// stateID is the sandbox id a runsc state directory entry is named after.
func stateID(name string) (string, bool) {
	if id, ok := strings.CutPrefix(name, "runsc-"); ok {
		id, ok = strings.CutSuffix(id, ".sock")
		return id, ok && strings.HasPrefix(id, idPrefix)
	}
	if i := strings.Index(name, "_sandbox:"); i > 0 && strings.HasPrefix(name, idPrefix) {
		return name[:i], true
	}
	return "", false
}

// removeStateDebris removes the entries runsc leaves in its state
// directory for a sandbox that died before it was saved (a lock file and
// a socket that runsc no longer lists, and so never deletes), for dead
// owners' ids only. It returns how many it removed.
func (t *Tier) removeStateDebris(here func(id string) bool, listed map[string]bool) (removed int) {
	entries, _ := os.ReadDir(t.state)
	for _, e := range entries {
		id, ok := stateID(e.Name())
		if !ok || listed[id] || !here(id) {
			continue
		}
		if err := os.Remove(filepath.Join(t.state, e.Name())); err != nil {
			logf("sweep: %v", err)
			continue
		}
		removed++
	}
	return removed
}
