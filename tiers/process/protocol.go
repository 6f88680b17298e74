package process

// The parent and the sandbox's first stage (this same binary, re-executed)
// speak JSON over two pipes: the parent sends a base spec (how to build the
// sandbox) and then a job spec (what to run in it); the stage reports
// "ready" once the sandbox is built and, at the end, how the program ended.
// A pooled sandbox is one that has received its base spec and waits for
// its job spec: the job's limits and secrets reach it only at claim time.

// stageEnv carries the stage name into the re-executed binary. Its value is
// one of the stage constants; nothing else is in the environment.
const stageEnv = "_AIRLOCK_PROCESS_STAGE"

// The stages.
const (
	stageContainer = "container" // level 3: namespaces, pivot_root, PID 1
	stageFilter    = "filter"    // level 2: seccomp, Landlock and rlimits, then exec
	stageWorker    = "worker"    // a guarded language worker
)

// Fixed descriptors in the re-executed stage.
const (
	fdSpec    = 3 // parent → stage: base spec, then job spec (JSON stream)
	fdStatus  = 4 // stage → parent: ready, then the final status (JSON stream)
	fdExe     = 5 // this binary, opened by the parent (exec'd via /proc/self/fd/5)
	fdScratch = 6 // the scratch directory to bind, when not a fresh tmpfs
	fdBinds   = 7 // granted read-only paths, in order
)

// bindSpec is one granted host path, passed as a descriptor.
type bindSpec struct {
	Target string `json:"target"` // absolute path inside the sandbox
	Fd     int    `json:"fd"`
	Dir    bool   `json:"dir"`
}

// baseSpec tells the container stage how to build the sandbox.
type baseSpec struct {
	Binds      []bindSpec `json:"binds,omitempty"`
	HasScratch bool       `json:"has_scratch"` // bind fdScratch rather than mount a fresh tmpfs
	ScratchMB  int64      `json:"scratch_mb"`
}

// rlimit is one resource limit to set before the program starts.
type rlimit struct {
	Resource int    `json:"resource"`
	Cur      uint64 `json:"cur"`
	Max      uint64 `json:"max"`
}

// jobSpec is what to run.
type jobSpec struct {
	Argv      []string          `json:"argv"`
	Env       []string          `json:"env"`
	Files     map[string]string `json:"files,omitempty"`
	Stdin     bool              `json:"stdin"`
	ScratchMB int64             `json:"scratch_mb"`
	Rlimits   []rlimit          `json:"rlimits"`
	ReadPaths []string          `json:"read_paths,omitempty"` // filter stage: Landlock read rules beyond the defaults
	Scratch   string            `json:"scratch,omitempty"`    // filter stage: the writable directory
	UID       uint32            `json:"uid,omitempty"`        // filter stage: the uid and gid to become
	Egress    bool              `json:"egress,omitempty"`     // container stage: run the egress forwarder
}

// status is the stage's report: ready (containers), placed, then final.
type status struct {
	Ready  bool   `json:"ready,omitempty"`
	Placed bool   `json:"placed,omitempty"` // the job's files are in the scratch; waiting for the go-ahead
	Exited bool   `json:"exited,omitempty"`
	Code   int    `json:"code"`
	Signal int    `json:"signal,omitempty"`
	Error  string `json:"error,omitempty"`
	// NotFound marks an Error that means the program does not exist.
	NotFound bool `json:"not_found,omitempty"`
}
