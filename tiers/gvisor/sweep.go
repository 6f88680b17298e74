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
				// A cgroup with tasks left cannot be removed; its sandbox
				// was killed above, so the tasks are exiting.
				_ = rmdirRetry(filepath.Join(cgroupRoot, h.Name(), g.Name()))
				removed++
			}
		}
	}
	return removed
}
