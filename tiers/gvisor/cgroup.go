package gvisor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock"
)

// cgroupRoot is where the cgroup v1 hierarchies are mounted.
var cgroupRoot = "/sys/fs/cgroup"

// cgroup is a sandbox's cgroup, created by the tier before runsc starts so
// that the tier can set limits (again at claim time, for pooled sandboxes)
// and read the out-of-memory count after the sandbox is gone. runsc joins
// an existing cgroup and leaves it in place; the tier removes it.
type cgroup struct {
	path string // relative to each hierarchy, e.g. "/airlock-gv-123-abcd"
}

// The controllers the tier writes to. runsc creates the others it needs.
var ownControllers = []string{"memory", "pids", "cpu", "cpuacct"}

func (g cgroup) file(ctrl, name string) string {
	return filepath.Join(cgroupRoot, ctrl, g.path, name)
}

func (g cgroup) create() error {
	for _, c := range ownControllers {
		if err := os.Mkdir(filepath.Join(cgroupRoot, c, g.path), 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			g.remove()
			return fmt.Errorf("creating cgroup: %w", err)
		}
	}
	return nil
}

// limits is what the tier writes into a sandbox's cgroup.
type limits struct {
	memory int64 // bytes
	pids   int64
	quota  int64 // CPU microseconds per 100 ms period
}

func cgroupLimits(l airlock.Limits, cpus float64) limits {
	return limits{
		memory: l.MemoryMB << 20,
		pids:   l.Pids + sandboxTasks,
		quota:  int64(cpus * 100_000),
	}
}

// sandboxTasks is headroom in pids.max for gVisor's own host threads (the
// Sentry's and the systrap stubs'): on cgroup v1 pids counts threads.
const sandboxTasks = 128

// set writes the limits. Lowering memory below current usage fails (the
// kernel cannot reclaim enough); the caller treats that as a failed claim.
func (g cgroup) set(l limits) error {
	mem := strconv.FormatInt(l.memory, 10)
	memory := [3]string{"memory", "memory.limit_in_bytes", mem}
	writes := [][3]string{memory}
	// memsw (absent where swap accounting is off) must stay at or above the
	// memory limit: raise it first, lower it last.
	if sw := [3]string{"memory", "memory.memsw.limit_in_bytes", mem}; exists(g.file(sw[0], sw[1])) {
		if cur, _ := readInt(g.file(memory[0], memory[1])); l.memory > cur {
			writes = [][3]string{sw, memory}
		} else {
			writes = [][3]string{memory, sw}
		}
	}
	writes = append(writes,
		[3]string{"pids", "pids.max", strconv.FormatInt(l.pids, 10)},
		[3]string{"cpu", "cpu.cfs_period_us", "100000"},
		[3]string{"cpu", "cpu.cfs_quota_us", strconv.FormatInt(l.quota, 10)},
	)
	for _, w := range writes {
		if err := os.WriteFile(g.file(w[0], w[1]), []byte(w[2]), 0o644); err != nil {
			return fmt.Errorf("setting %s: %w", w[1], err)
		}
	}
	return nil
}

// ooms returns how many times the kernel's OOM killer fired in the cgroup,
// or the failure count of memory charges where oom_kill is not reported.
func (g cgroup) ooms() int64 {
	data, err := os.ReadFile(g.file("memory", "memory.oom_control"))
	if err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
				n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				return n
			}
		}
	}
	n, _ := readInt(g.file("memory", "memory.failcnt"))
	return n
}

// cpuTime returns the CPU time the cgroup used.
func (g cgroup) cpuTime() time.Duration {
	n, _ := readInt(g.file("cpuacct", "cpuacct.usage"))
	return time.Duration(n)
}

func (g cgroup) maxMemory() int64 {
	n, _ := readInt(g.file("memory", "memory.max_usage_in_bytes"))
	return n
}

// remove deletes the cgroup from every hierarchy it exists in (runsc adds
// it to more than the tier's own), retrying while exiting tasks leave it.
func (g cgroup) remove() error {
	hier, _ := os.ReadDir(cgroupRoot)
	var errs []error
	for _, h := range hier {
		dir := filepath.Join(cgroupRoot, h.Name(), g.path)
		if err := rmdirRetry(dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func rmdirRetry(dir string) error {
	var err error
	for i := 0; i < 50; i++ {
		err = os.Remove(dir)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("removing cgroup %s: %w", dir, err)
}

func readInt(path string) (int64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// pidsHits returns how many forks the pids limit refused.
func (g cgroup) pidsHits() int64 {
	data, _ := os.ReadFile(g.file("pids", "pids.events"))
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "max "); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}
