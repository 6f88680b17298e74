package gvisor

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/image"
)

// Paths inside the sandbox.
const (
	scratchDir  = "/scratch"  // the job's writable working directory
	agentDir    = "/.airlock" // the agent binary and its socket (pooled sandboxes)
	agentBin    = agentDir + "/agent"
	guardBin    = agentDir + "/guard"
	agentSock   = agentDir + "/sock/agent.sock"
	defaultPATH = image.DefaultPATH
)

// sandboxUID runs the job: an unprivileged user inside gVisor ("nobody"), so
// that even inside the sandbox the job cannot signal or trace the agent.
const sandboxUID = 65534

// bundle is what a sandbox is built from.
type bundle struct {
	rootfs   string   // absolute, real path of the read-only root
	hostDirs []string // host program directories present in rootfs
	args     []string
	env      []string
	cwd      string
	uid      uint32
	scratch  string // host directory bind-mounted at /scratch ("" = a tmpfs)
	sockDir  string // host directory bind-mounted at agentDir/sock ("" = none)
	agent    string // host path of the agent binary ("" = none)
	agentLib string // host directory bind-mounted at agentLibDir ("" = none)
	guard    string // host path of the exec guard's binary, at guardBin ("" = none)
	// noExec: the first process may not execute another program (see
	// noExecFilter); runsc must run with --oci-seccomp for it to hold.
	noExec bool
	image  bool   // rootfs is an image's root (see images.go)
	etc    string // with an image: the host directory of the files mounted over its /etc
	// grants are the job's read grants, each bound at its guest path:
	// read-only, or, for a copy, writable through the memory-backed
	// overlay runsc puts over every writable mount (see runscFlags).
	grants airlock.FSGrant
	// scratchMB caps the scratch and /tmp when the scratch is a tmpfs
	// (0: bounded by the memory limit alone).
	scratchMB int64
	cgroup    string
	limits    airlock.Limits
	cpus      float64
}

// jobEnv is the job's whole environment in the host view: the baseline
// every tier gives (PATH, HOME=/scratch, TMPDIR=/tmp, LANG=C.UTF-8; see
// image.Baseline), then the job's variables, sorted, which replace any of
// the same name. Nothing comes from the host.
func jobEnv(vars map[string]string) []string {
	names := make([]string, 0, len(vars))
	for k := range vars {
		names = append(names, k)
	}
	sort.Strings(names)
	over := make([]string, 0, len(names))
	for _, k := range names {
		over = append(over, k+"="+vars[k])
	}
	return image.Baseline(over...)
}

func ptr[T any](v T) *T { return &v }

// noExecFilter is the OCI seccomp profile of a job without the spawn
// grant that is the sandbox's first process: every execve and execveat
// fails with a permission error (a shell says 126), as under the exec
// guard; runsc ignores errnoRet and answers EPERM, not EACCES. runsc
// (--oci-seccomp) loads the first program itself, without an execve, and
// installs the filter on it before it runs; its children inherit it. The
// sentry implements only the native ABI, so no other architecture's or
// x32's execve reaches it. ptrace is refused too (see below).
func noExecFilter() *specs.LinuxSeccomp {
	arch := specs.ArchX86_64
	if runtime.GOARCH == "arm64" {
		arch = specs.ArchAARCH64
	}
	return &specs.LinuxSeccomp{
		DefaultAction: specs.ActAllow,
		Architectures: []specs.Arch{arch},
		Syscalls: []specs.LinuxSyscall{{
			Names:    []string{"execve", "execveat"},
			Action:   specs.ActErrno,
			ErrnoRet: ptr(uint(syscall.EACCES)),
		}, {
			// A tracer could rewrite a traced child's allowed system
			// call into an execve at its entry stop: the sentry does not
			// run the filter again after the stop.
			Names:    []string{"ptrace"},
			Action:   specs.ActErrno,
			ErrnoRet: ptr(uint(syscall.EPERM)),
		}},
	}
}

// spec returns the OCI runtime spec for b.
func (b *bundle) spec() *specs.Spec {
	l := cgroupLimits(b.limits, b.cpus)
	nofile := uint64(b.limits.Files)
	s := &specs.Spec{
		Version:  specs.Version,
		Hostname: "airlock",
		Root:     &specs.Root{Path: b.rootfs, Readonly: true},
		Process: &specs.Process{
			Args:            b.args,
			Env:             b.env,
			Cwd:             b.cwd,
			User:            specs.User{UID: b.uid, GID: b.uid},
			NoNewPrivileges: true,
			Capabilities:    &specs.LinuxCapabilities{},
			Rlimits: []specs.POSIXRlimit{
				{Type: "RLIMIT_NOFILE", Hard: nofile, Soft: nofile},
				{Type: "RLIMIT_CORE", Hard: 0, Soft: 0},
			},
		},
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "mode=755"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec"}},
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "nodev", "mode=1777"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
			{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: b.sized("nosuid", "nodev", "mode=1777")},
		},
		Linux: &specs.Linux{
			CgroupsPath: b.cgroup,
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.NetworkNamespace}, {Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace}, {Type: specs.MountNamespace},
			},
			Resources: &specs.LinuxResources{
				Memory: &specs.LinuxMemory{Limit: ptr(l.memory), Swap: ptr(l.memory)},
				CPU:    &specs.LinuxCPU{Quota: ptr(l.quota), Period: ptr(uint64(100_000))},
				Pids:   &specs.LinuxPids{Limit: ptr(l.pids)},
			},
		},
	}
	if b.noExec {
		s.Linux.Seccomp = noExecFilter()
	}
	if b.agent != "" {
		// The agent runs as root inside the sandbox and drops to the job's
		// user for the job itself; it keeps the capabilities it needs for
		// that (setuid/setgid, chown of the job's files, killing leftovers,
		// restoring its own file limit after lowering it for a job).
		s.Process.Capabilities = &specs.LinuxCapabilities{
			Bounding:  agentCaps,
			Effective: agentCaps,
			Permitted: agentCaps,
		}
	}
	for _, d := range b.hostDirs {
		s.Mounts = append(s.Mounts, roBind(d, d))
	}
	s.Mounts = append(s.Mounts, grantMounts(b.grants)...)
	if b.scratch != "" {
		s.Mounts = append(s.Mounts, specs.Mount{Destination: scratchDir, Type: "bind", Source: b.scratch, Options: []string{"rbind", "rw", "nosuid", "nodev"}})
	} else {
		s.Mounts = append(s.Mounts, specs.Mount{Destination: scratchDir, Type: "tmpfs", Source: "tmpfs", Options: b.sized("nosuid", "nodev", "mode=755")})
	}
	if b.agent != "" {
		s.Mounts = append(s.Mounts, roBind(b.agent, agentBin))
	}
	if b.agentLib != "" {
		s.Mounts = append(s.Mounts, roBind(b.agentLib, agentLibDir))
	}
	if b.guard != "" {
		s.Mounts = append(s.Mounts, roBind(b.guard, guardBin))
	}
	if b.sockDir != "" {
		s.Mounts = append(s.Mounts, specs.Mount{Destination: filepath.Dir(agentSock), Type: "bind", Source: b.sockDir, Options: []string{"rbind", "rw", "nosuid", "nodev", "noexec"}})
	}
	if b.image {
		// Last: were one of these a link in the image into a writable
		// mount, the tier's file would still cover what it names.
		// A grant placed over one of them (at /etc) shows the job what it
		// was granted instead.
		for _, name := range etcFiles {
			if dst := "/etc/" + name; !covered(b.grants, dst) {
				s.Mounts = append(s.Mounts, roBind(filepath.Join(b.etc, name), dst))
			}
		}
	}
	return s
}

// etcFiles are the files of /etc the tier writes itself: in the host
// view's root, and mounted over an image's own.
var etcFiles = []string{"passwd", "group", "hosts", "hostname", "resolv.conf"}

var agentCaps = []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_KILL", "CAP_SETUID", "CAP_SETGID", "CAP_SYS_RESOURCE"}

// sized adds the scratch cap to a tmpfs's options.
func (b *bundle) sized(opts ...string) []string {
	if b.scratchMB > 0 {
		opts = append(opts, fmt.Sprintf("size=%dm", b.scratchMB))
	}
	return opts
}

// grantMounts binds each read grant at its guest path, parents before
// what they hold (a path sorts before every path under it). A copy is a
// writable bind: runsc's memory overlay takes its writes (the host file
// is only read), and the overlay's size is the scratch cap.
func grantMounts(fs airlock.FSGrant) []specs.Mount {
	hosts := slices.Clone(fs.Read)
	slices.SortFunc(hosts, func(a, b string) int { return strings.Compare(fs.GuestPath(a), fs.GuestPath(b)) })
	mounts := make([]specs.Mount, 0, len(hosts))
	for _, h := range hosts {
		m := roBind(h, fs.GuestPath(h))
		if slices.Contains(fs.Copy, h) {
			m.Options = []string{"rbind", "rw", "nosuid", "nodev"}
		}
		mounts = append(mounts, m)
	}
	return mounts
}

// covered reports whether a read grant's guest path is dst or holds it.
func covered(fs airlock.FSGrant, dst string) bool {
	for _, h := range fs.Read {
		if g := fs.GuestPath(h); g == dst || strings.HasPrefix(dst, strings.TrimSuffix(g, "/")+"/") {
			return true
		}
	}
	return false
}

// copyGuests are the guest paths of the job's writable copies.
func copyGuests(fs airlock.FSGrant) []string {
	var gs []string
	for _, h := range fs.Copy {
		gs = append(gs, fs.GuestPath(h))
	}
	return gs
}

func roBind(src, dst string) specs.Mount {
	return specs.Mount{Destination: dst, Type: "bind", Source: src, Options: []string{"rbind", "ro", "nosuid", "nodev"}}
}

// write writes config.json into dir.
func (b *bundle) write(dir string) error {
	if err := b.checkGuests(); err != nil {
		return err
	}
	s, err := placeMountPoints(b.spec(), dir)
	if err != nil {
		return err
	}
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o600); err != nil {
		return fmt.Errorf("writing bundle: %w", err)
	}
	return nil
}
