package gvisor

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// alive reports whether a process with the given PID exists.
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// orphaned reports whether name belongs to a sandbox whose owning airlock
// process is gone.
func orphaned(name string) bool {
	pid := ownerPID(name)
	return pid > 0 && pid != os.Getpid() && !alive(pid)
}

// Sweep removes what crashed airlock processes left in the tier's
// directory and the cgroup hierarchies (New already sweeps once) and
// returns how many items it removed.
func (t *Tier) Sweep() int {
	if t.avail != nil {
		return 0
	}
	return t.sweep()
}

// sweep removes what crashed airlock processes left behind in this tier's
// directory: runsc sandboxes (killed and deleted), sandbox directories and
// cgroups, all recognised by the id prefix and a dead owner PID. A PID
// reused by an unrelated process hides its sandboxes until that process
// exits (see docs).
func (t *Tier) sweep() (removed int) {
	out, err := t.runscOut(context.Background(), "list", "--format", "json")
	if err == nil {
		var list []struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(out, &list) == nil {
			for _, c := range list {
				if orphaned(c.ID) {
					if err := t.destroy(c.ID, "", true); err != nil {
						logf("sweep: %v", err)
					}
					removed++
				}
			}
		}
	}
	entries, _ := os.ReadDir(filepath.Join(t.base, "sb"))
	for _, e := range entries {
		if orphaned(e.Name()) {
			_ = os.RemoveAll(filepath.Join(t.base, "sb", e.Name()))
			removed++
		}
	}
	hier, _ := os.ReadDir(cgroupRoot)
	for _, h := range hier {
		groups, _ := os.ReadDir(filepath.Join(cgroupRoot, h.Name()))
		for _, g := range groups {
			if g.IsDir() && strings.HasPrefix(g.Name(), idPrefix) && orphaned(g.Name()) {
				// One attempt: a cgroup that still has tasks belongs to a
				// sandbox of another state directory, which this sweep
				// cannot kill (its own sandboxes were destroyed above).
				if os.Remove(filepath.Join(cgroupRoot, h.Name(), g.Name())) == nil {
					removed++
				}
			}
		}
	}
	return removed
}
