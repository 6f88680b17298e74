package process

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	cgroups "github.com/containerd/cgroups/v3"
	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// cgroupRoot is where the kernel's cgroup filesystems are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// limits are what a job's cgroup enforces.
type cgLimits struct {
	memoryBytes int64
	pids        int64
	cpuQuotaUS  int64 // per 100 ms period; 0: no cap
}

// jobCgroup is one job's control group, on whichever cgroup version the
// host runs (v1: memory, pids, cpu, cpuacct and freezer controllers; v2:
// the unified hierarchy).
type jobCgroup interface {
	add(pid int) error
	// joinFiles are the files a thread writes "0" to in order to move
	// itself in (see stage.BaseSpec.CgroupFds), opened at creation when
	// the group was made for a stage that joins by itself; nil when there
	// are none (not asked for; v2, where threads of one process cannot be
	// in different groups: see dir; or an open failed: the parent then
	// uses add).
	joinFiles() []*os.File
	// dir is the group's directory, opened at creation, for a clone
	// straight into it (v2's CLONE_INTO_CGROUP); nil on v1, or when the
	// open failed: the parent then uses add.
	dir() *os.File
	update(l cgLimits) error
	// setMemory changes only the memory limit (one file write: the fast
	// path for claiming a guarded worker).
	setMemory(bytes int64) error
	// holdMemoryLimit opens the memory limit file ahead of setMemory, so
	// that the claim pays one write rather than a path walk, an open, a
	// write and a close (≈ 90 µs on a cold CPU here). destroy closes it.
	holdMemoryLimit() error
	// events reports whether the memory limit killed something and how
	// often a fork was refused by the pids limit.
	events() (oomKills, pidsMax int64)
	// usage reports peak memory and CPU time consumed.
	usage() (peakBytes, cpuUS int64)
	// kill SIGKILLs every process in the group but except (0: none) and
	// waits until only that one is left.
	kill(except int) error
	// destroy kills what is left and removes the group.
	destroy() error
}

// cgroupV2 reports whether the host runs the unified hierarchy only.
func cgroupV2() bool { return cgroups.Mode() == cgroups.Unified }

// cgroupAvailable says why per-job cgroups cannot be made here, or nil.
func cgroupAvailable() error {
	if cgroupV2() {
		if _, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.subtree_control")); err != nil {
			return fmt.Errorf("cgroup v2 hierarchy: %w", err)
		}
		return nil
	}
	for _, s := range []string{"memory", "pids", "cpu", "freezer"} {
		if _, err := os.Stat(filepath.Join(cgroupRoot, s, "cgroup.procs")); err != nil {
			return fmt.Errorf("cgroup v1 %s controller is not mounted: %w", s, err)
		}
	}
	return nil
}

// newJobCgroup makes the named group with limits l; selfJoin opens the
// files a stage joins it through (see joinFiles) for a start that uses
// them, sparing every other group (pooled sandboxes, guarded workers)
// five opens and closes.
func newJobCgroup(name string, l cgLimits, selfJoin bool) (jobCgroup, error) {
	// No typed nil in the interface on failure: callers test it for nil.
	if cgroupV2() {
		cg, err := newCgroupV2(name, l)
		if err != nil {
			return nil, err
		}
		return cg, nil
	}
	cg, err := newCgroupV1(name, l, selfJoin)
	if err != nil {
		return nil, err
	}
	return cg, nil
}

// spareCgroup holds at most one empty cgroup made ahead of need. A start
// takes it instead of creating its own (≈ 0.2 ms of a CPU on v1, five
// hierarchies, beside the start), setting the start's limits if they
// differ: a group with no task takes any limit. It is filled after a
// sandbox is destroyed, off the caller's path, and removed by close; a
// crashed process's spare is swept like any other cgroup of ours.
type spareCgroup struct {
	mu     sync.Mutex
	cg     jobCgroup
	limits cgLimits
	making bool
	closed bool
}

// take returns the spare with limits l set, or nil when there is none or
// it could not take them.
func (s *spareCgroup) take(l cgLimits) jobCgroup {
	s.mu.Lock()
	cg, have := s.cg, s.limits
	s.cg = nil
	s.mu.Unlock()
	if cg == nil {
		return nil
	}
	if l != have {
		if err := cg.update(l); err != nil {
			_ = cg.destroy()
			return nil
		}
	}
	return cg
}

// fill makes a spare with limits l, named for baseDir, unless there is
// one (or one being made) or s is closed.
func (s *spareCgroup) fill(baseDir string, l cgLimits) {
	s.mu.Lock()
	if s.cg != nil || s.making || s.closed {
		s.mu.Unlock()
		return
	}
	s.making = true
	s.mu.Unlock()
	cg, err := newJobCgroup(newName(baseDir), l, true) // only direct starts take it
	s.mu.Lock()
	defer s.mu.Unlock()
	s.making = false
	switch {
	case err != nil: // the next start creates its own, and reports why it cannot
	case s.closed || s.cg != nil:
		_ = cg.destroy()
	default:
		s.cg, s.limits = cg, l
	}
}

// close removes the spare; later fills make none.
func (s *spareCgroup) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.cg != nil {
		_ = s.cg.destroy()
		s.cg = nil
	}
}

// ---- v1 ----

var v1Subsystems = []cgroup1.Name{cgroup1.Memory, cgroup1.Pids, cgroup1.Cpu, cgroup1.Cpuacct, cgroup1.Freezer}

func v1Hierarchy() ([]cgroup1.Subsystem, error) {
	return []cgroup1.Subsystem{
		cgroup1.NewMemory(cgroupRoot), cgroup1.NewPids(cgroupRoot), cgroup1.NewCpu(cgroupRoot),
		cgroup1.NewCpuacct(cgroupRoot), cgroup1.NewFreezer(cgroupRoot),
	}, nil
}

type cgroupV1 struct {
	name     string
	cg       cgroup1.Cgroup
	memLimit *os.File // held open by holdMemoryLimit
	// The files events and usage read, opened at creation.
	oomControl, pidsEvents, memPeak, cpuUsage cgFile
	procs                                     []cgFile // one per hierarchy
	tasks                                     []*os.File
}

// v1Resources: on v1 the kernel's OOM killer is disabled for the group —
// a task reaching the limit waits instead — and the tier stops the job
// when it sees the group under OOM. Left to the OOM killer, a second kill
// while the first victim is still exiting can take the stage, whose
// orphans would then be re-parented to the host's init.
func v1Resources(l cgLimits) *specs.LinuxResources {
	disable := true
	r := &specs.LinuxResources{
		Memory: &specs.LinuxMemory{Limit: &l.memoryBytes, DisableOOMKiller: &disable},
		Pids:   &specs.LinuxPids{Limit: &l.pids},
	}
	if l.cpuQuotaUS > 0 {
		period := uint64(100_000)
		r.CPU = &specs.LinuxCPU{Quota: &l.cpuQuotaUS, Period: &period}
	}
	return r
}

func newCgroupV1(name string, l cgLimits, selfJoin bool) (*cgroupV1, error) {
	cg, err := cgroup1.New(cgroup1.StaticPath("/"+name), v1Resources(l), cgroup1.WithHierarchy(v1Hierarchy))
	if err != nil {
		return nil, fmt.Errorf("creating cgroup %s: %w", name, err)
	}
	c := &cgroupV1{name: name, cg: cg}
	c.oomControl, c.pidsEvents = openStat(c.file("memory", "memory.oom_control")), openStat(c.file("pids", "pids.events"))
	c.memPeak, c.cpuUsage = openStat(c.file("memory", "memory.max_usage_in_bytes")), openStat(c.file("cpuacct", "cpuacct.usage"))
	for _, s := range v1Subsystems {
		c.procs = append(c.procs, openProcs(c.file(string(s), "cgroup.procs")))
	}
	if selfJoin {
		c.tasks = c.openTasks()
	}
	return c, nil
}

// openTasks opens the group's "tasks" file in every hierarchy, or none.
func (c *cgroupV1) openTasks() []*os.File {
	var files []*os.File
	for _, s := range v1Subsystems {
		f, err := os.OpenFile(c.file(string(s), "tasks"), os.O_WRONLY, 0)
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			return nil
		}
		files = append(files, f)
	}
	return files
}

func (c *cgroupV1) joinFiles() []*os.File { return c.tasks }
func (c *cgroupV1) dir() *os.File         { return nil }

func (c *cgroupV1) add(pid int) error {
	for _, p := range c.procs {
		if err := p.add(pid); err != nil {
			return err
		}
	}
	return nil
}

func (c *cgroupV1) update(l cgLimits) error { return c.cg.Update(v1Resources(l)) }

func (c *cgroupV1) setMemory(bytes int64) error {
	return writeLimit(c.memLimit, c.file("memory", "memory.limit_in_bytes"), bytes)
}

func (c *cgroupV1) holdMemoryLimit() (err error) {
	c.memLimit, err = os.OpenFile(c.file("memory", "memory.limit_in_bytes"), os.O_WRONLY, 0)
	return err
}

func (c *cgroupV1) file(subsys, name string) string {
	return filepath.Join(cgroupRoot, subsys, c.name, name)
}

func (c *cgroupV1) events() (oomKills, pidsMax int64) {
	oc := readKeys(c.oomControl, "oom_kill", "under_oom")
	return oc[0] + oc[1], readKey(c.pidsEvents, "max")
}

func (c *cgroupV1) usage() (peakBytes, cpuUS int64) {
	peak, _ := readInt(c.memPeak)
	ns, _ := readInt(c.cpuUsage)
	return peak, ns / 1000
}

func (c *cgroupV1) kill(except int) error {
	return killAll(func() ([]int, error) { return readPids(c.file("pids", "cgroup.procs")) },
		func() error { return os.WriteFile(c.file("freezer", "freezer.state"), []byte("FROZEN"), 0) },
		func() error { return os.WriteFile(c.file("freezer", "freezer.state"), []byte("THAWED"), 0) }, except)
}

func (c *cgroupV1) destroy() error {
	if c.memLimit != nil {
		c.memLimit.Close()
	}
	closeFiles(c.oomControl, c.pidsEvents, c.memPeak, c.cpuUsage)
	closeFiles(c.procs...)
	for _, f := range c.tasks {
		f.Close()
	}
	kerr := c.kill(0)
	return errors.Join(kerr, removeCgroupV1(c.name))
}

// removeCgroupV1 removes the named group from every controller it lives
// in, retrying briefly while the kernel finishes tearing down its tasks.
func removeCgroupV1(name string) error {
	var errs []error
	for _, s := range v1Subsystems {
		dir := filepath.Join(cgroupRoot, string(s), name)
		if err := rmdirRetry(dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ---- v2 ----

type cgroupV2m struct {
	name     string
	m        *cgroup2.Manager
	memLimit *os.File // held open by holdMemoryLimit
	// The files events and usage read, opened at creation.
	memEvents, pidsEvents, memPeak, cpuStat cgFile
	procs                                   cgFile
	dirF                                    *os.File
}

func v2Resources(l cgLimits) *cgroup2.Resources {
	r := &cgroup2.Resources{
		Memory: &cgroup2.Memory{Max: &l.memoryBytes},
		Pids:   &cgroup2.Pids{Max: l.pids},
	}
	if l.cpuQuotaUS > 0 {
		period := uint64(100_000)
		r.CPU = &cgroup2.CPU{Max: cgroup2.NewCPUMax(&l.cpuQuotaUS, &period)}
	}
	return r
}

func newCgroupV2(name string, l cgLimits) (*cgroupV2m, error) {
	m, err := cgroup2.NewManager(cgroupRoot, "/"+name, v2Resources(l))
	if err != nil {
		return nil, fmt.Errorf("creating cgroup %s: %w", name, err)
	}
	c := &cgroupV2m{name: name, m: m}
	c.memEvents, c.pidsEvents = openStat(c.file("memory.events")), openStat(c.file("pids.events"))
	c.memPeak, c.cpuStat = openStat(c.file("memory.peak")), openStat(c.file("cpu.stat"))
	c.procs = openProcs(c.file("cgroup.procs"))
	c.dirF, _ = os.Open(filepath.Join(cgroupRoot, name))
	return c, nil
}

func (c *cgroupV2m) add(pid int) error       { return c.procs.add(pid) }
func (c *cgroupV2m) joinFiles() []*os.File   { return nil }
func (c *cgroupV2m) dir() *os.File           { return c.dirF }
func (c *cgroupV2m) update(l cgLimits) error { return c.m.Update(v2Resources(l)) }
func (c *cgroupV2m) setMemory(bytes int64) error {
	return writeLimit(c.memLimit, c.file("memory.max"), bytes)
}

func (c *cgroupV2m) holdMemoryLimit() (err error) {
	c.memLimit, err = os.OpenFile(c.file("memory.max"), os.O_WRONLY, 0)
	return err
}
func (c *cgroupV2m) file(name string) string { return filepath.Join(cgroupRoot, c.name, name) }

func (c *cgroupV2m) events() (oomKills, pidsMax int64) {
	return readKey(c.memEvents, "oom_kill"), readKey(c.pidsEvents, "max")
}

func (c *cgroupV2m) usage() (peakBytes, cpuUS int64) {
	peak, _ := readInt(c.memPeak)
	return peak, readKey(c.cpuStat, "usage_usec")
}

func (c *cgroupV2m) kill(except int) error {
	return killAll(func() ([]int, error) { return readPids(c.file("cgroup.procs")) },
		func() error { return os.WriteFile(c.file("cgroup.freeze"), []byte("1"), 0) },
		func() error { return os.WriteFile(c.file("cgroup.freeze"), []byte("0"), 0) }, except)
}

func (c *cgroupV2m) destroy() error {
	if c.memLimit != nil {
		c.memLimit.Close()
	}
	closeFiles(c.procs, c.memEvents, c.pidsEvents, c.memPeak, c.cpuStat)
	if c.dirF != nil {
		c.dirF.Close()
	}
	kerr := c.kill(0)
	return errors.Join(kerr, rmdirRetry(filepath.Join(cgroupRoot, c.name)))
}

// ---- shared ----

// writeLimit writes a limit through f, the file held open, or else by
// name.
func writeLimit(f *os.File, name string, v int64) error {
	b := strconv.AppendInt(nil, v, 10)
	if f == nil {
		return os.WriteFile(name, b, 0)
	}
	_, err := f.Write(b)
	return err
}

// killAll asks the kernel to freeze the group (so nothing forks while we
// look; without waiting for it, as tasks blocked at the memory limit do not
// freeze), SIGKILLs every member, thaws it so the kills are delivered, and
// repeats until the group is empty (bounded).
func killAll(procs func() ([]int, error), freeze, thaw func() error, except int) error {
	for range 100 {
		pids, err := procs()
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		others := pids[:0]
		for _, pid := range pids {
			if pid != except {
				others = append(others, pid)
			}
		}
		if len(others) == 0 {
			return nil
		}
		_ = freeze()
		for _, pid := range others {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		_ = thaw()
		time.Sleep(2 * time.Millisecond)
	}
	return fmt.Errorf("cgroup still has processes after repeated SIGKILL")
}

func rmdirRetry(dir string) error {
	var err error
	for i := range 200 {
		err = syscall.Rmdir(dir)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) {
			break
		}
		time.Sleep(time.Duration(i+1) * 100 * time.Microsecond)
	}
	return fmt.Errorf("removing cgroup %s: %w", dir, err)
}

func readPids(file string) ([]int, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var out []int
	for _, f := range strings.Fields(string(data)) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out, nil
}

// cgFile is a cgroup file used during and after a job, opened once when
// the group is made (off the job's path): a read through the held
// descriptor (pread from offset 0, which the kernel answers afresh) or a
// write costs a few microseconds; by name, with a path walk in the cgroup
// filesystem, an open and a close, 20–30 each here (moving a process into
// v1's five hierarchies: 118 µs by name, 32 µs held, on every cold
// start's path). Without the descriptor (the open failed) it is used by
// name, which then reports why it cannot.
type cgFile struct {
	path string
	f    *os.File
}

// openStat opens a file to read (events, usage).
func openStat(path string) cgFile { return openCgFile(path, os.O_RDONLY) }

// openProcs opens a group's cgroup.procs to move processes in.
func openProcs(path string) cgFile { return openCgFile(path, os.O_WRONLY) }

func openCgFile(path string, flag int) cgFile {
	f, err := os.OpenFile(path, flag, 0)
	if err != nil {
		return cgFile{path: path}
	}
	return cgFile{path: path, f: f}
}

// add moves pid in (the file is a cgroup.procs).
func (s cgFile) add(pid int) error {
	b := strconv.AppendInt(nil, int64(pid), 10)
	var err error
	if s.f == nil {
		err = os.WriteFile(s.path, b, 0)
	} else {
		_, err = s.f.Write(b)
	}
	if err != nil {
		return fmt.Errorf("adding %d to %s: %w", pid, s.path, err)
	}
	return nil
}

func (s cgFile) read() ([]byte, error) {
	if s.f == nil {
		return os.ReadFile(s.path)
	}
	buf := make([]byte, 1024) // the largest, cpu.stat and oom_control, are far smaller
	n, err := s.f.ReadAt(buf, 0)
	if err == io.EOF {
		err = nil
	}
	return buf[:n], err
}

func closeFiles(files ...cgFile) {
	for _, s := range files {
		if s.f != nil {
			s.f.Close()
		}
	}
}

func readInt(file cgFile) (int64, error) {
	data, err := file.read()
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
}

// readKey reads "key value" lines and returns the value for key (0 if absent).
func readKey(file cgFile, key string) int64 { return readKeys(file, key)[0] }

// readKeys reads the file once and returns the value of each key (0 if
// absent).
func readKeys(file cgFile, keys ...string) []int64 {
	out := make([]int64, len(keys))
	data, err := file.read()
	if err != nil {
		return out
	}
	for _, line := range strings.Split(string(data), "\n") {
		k, v, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		for i, key := range keys {
			if k == key {
				out[i], _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			}
		}
	}
	return out
}
