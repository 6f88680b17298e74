package stage

import "github.com/airlock-sandbox/airlock/role"

// The parent and the sandbox's first stage (this same binary, re-executed,
// or the separate stage binary of the same build) speak the wire package's
// binary frames over two pipes (see codec.go): the parent sends a base spec (how to build the
// sandbox) and then a job spec (what to run in it); the stage reports
// "ready" once the sandbox is built and, at the end, how the program ended.
// A pooled sandbox is one that has received its base spec and waits for
// its job spec: the job's limits and secrets reach it only at claim time.

// Env carries the stage's role name into the re-executed binary (see
// package role). Its value is one of the stage constants; nothing else is
// in the environment.
const Env = role.Env

// The stages, each a role.
const (
	Container = "process-container" // level 3: namespaces, pivot_root, PID 1
	Filter    = "process-filter"    // level 2: seccomp, Landlock and rlimits, then exec
	Worker    = "process-worker"    // a guarded language worker
	Forwarder = "process-forwarder" // the egress forwarder a level-3 PID 1 starts for a net-granted job
	Spawner   = "process-spawner"   // starts containers for the parent (see spawn.go)
)

// FdFirst is the first descriptor a process inherits after stdin, stdout
// and stderr (os/exec's ExtraFiles[0]).
const FdFirst = 3

// Fixed descriptors in the re-executed stage. From FdBinds on, the parent
// numbers each further descriptor it passes and names it in the spec.
const (
	FdSpec    = FdFirst + iota // parent → stage: base spec, then job spec (frames)
	FdStatus                   // stage → parent: ready, then the final status (frames)
	FdExe                      // the stage's binary, opened by the parent (exec'd via /proc/self/fd/5)
	FdScratch                  // the scratch directory to bind, when not a fresh tmpfs
	FdBinds                    // granted read-only paths, in order
)

// BindSpec is one granted host path, passed as a descriptor.
type BindSpec struct {
	Target string // absolute path inside the sandbox
	Fd     int
	Dir    bool
	// Placed: Target is a guest path (grants.fs.at), not the grant's
	// own host path.
	Placed bool
	// Copy: the grant is copied, writable, into the sandbox's scratch
	// space at Target (grants.fs.copy) rather than bound read-only.
	Copy bool
}

// BaseSpec tells the container stage how to build the sandbox.
type BaseSpec struct {
	Binds      []BindSpec
	HasScratch bool // bind FdScratch rather than mount a fresh tmpfs
	ScratchMB  int64
	// Egress: the egress directory is bound; start the forwarder ahead of
	// the job (it is stopped before the program starts if the job has no
	// net grant).
	Egress bool
	// ForwarderFd is the descriptor of the binary the forwarder runs
	// (the parent's, which has the egress code) when the stage is a
	// separate binary; 0: this binary (FdExe).
	ForwarderFd int
	// EtcFd is the descriptor of a detached clone of the process
	// package's /etc template, attached as the sandbox's /etc; 0: the
	// stage builds /etc itself.
	EtcFd int
	// RootFd is the descriptor of a detached, read-only clone of an
	// image's unpacked root (made by the parent with open_tree), which
	// becomes the sandbox's root in place of the host's /usr and /etc;
	// 0: the host view.
	RootFd int
	// Seccomp is the program the job is confined with (package seccomp's
	// Program for containers); the stage refuses to run without one.
	// SeccompNoExec replaces it for a job without the spawn grant (see
	// JobSpec.NoExec).
	Seccomp, SeccompNoExec []byte
	// CgroupFds are the job's cgroup's per-thread membership files (v1
	// "tasks", one per hierarchy), opened by the parent: the stage joins
	// the group itself, first, by writing "0" to each (see JoinCgroup).
	// None: the parent moves the stage in.
	CgroupFds []int
}

// Rlimit is one resource limit to set before the program starts.
type Rlimit struct {
	Resource int
	Cur      uint64
	Max      uint64
}

// JobSpec is what to run.
type JobSpec struct {
	Argv      []string
	Env       []string
	Files     map[string]string
	Stdin     bool
	ScratchMB int64
	Rlimits   []Rlimit
	ReadPaths []string // filter stage: Landlock read rules beyond the defaults
	Scratch   string   // filter stage: the writable directory
	UID       uint32   // filter stage: the uid and gid to become
	Seccomp   []byte   // filter stage: the program to confine with
	Egress    bool     // container stage: run the egress forwarder
	// NoExec: spawn is withheld, so the program may execute nothing but
	// itself (see execOnly); the filter stage's Seccomp then refuses
	// memfd_create, as a container's SeccompNoExec does.
	NoExec bool
	// CgroupFds: as BaseSpec.CgroupFds, for the filter stage (which reads
	// no base spec); it joins before anything else.
	CgroupFds []int
	// Go: start the program once the files are placed, without reporting
	// them placed and waiting for the go-ahead (the parent has no check to
	// make, or checked the fresh, empty scratch and there are no files).
	Go bool
}

// Status is the stage's report: ready (containers), placed, then final.
type Status struct {
	Ready  bool
	Placed bool // the job's files are in the scratch; waiting for the go-ahead
	Exited bool
	Code   int
	Signal int
	Error  string
	// NotFound marks an Error that means the program does not exist
	// (exit status 127); NoExec one that means it cannot be executed
	// (126). Error is then the line execguard.StartFailure gives, without
	// its "airlock: " prefix.
	NotFound bool
	NoExec   bool
	// Field, when set, names the job field that made the start fail: the
	// job is invalid as given (a copy that does not fit its scratch).
	Field string
}
