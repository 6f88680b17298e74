package airlock

import (
	"strings"
	"time"
)

// Result is what a run produced. A tier fills it in as far as the run got,
// also when it returns an error: output written before a stop is kept.
// Stdout and Stderr hold the bytes the program wrote; on the wire, output
// that is not valid UTF-8 is {"base64": "..."} instead of a string.
type Result struct {
	Tier     string     `json:"tier"`
	Level    Level      `json:"level"`
	Value    any        `json:"value"`
	Stdout   string     `json:"stdout"`
	Stderr   string     `json:"stderr"`
	ExitCode int        `json:"exit_code"`
	Stopped  *Stop      `json:"stopped,omitempty"`
	Error    *ErrorInfo `json:"error,omitempty"`
	Timings  Timings    `json:"timings"`
	Usage    Usage      `json:"usage,omitzero"`
	Clock    time.Time  `json:"clock,omitzero"`
	Seed     uint64     `json:"seed,omitempty"`
	// Image is the digest of the image a command job ran in ("host" for
	// the host view); replaying a job pins it.
	Image    string   `json:"image,omitempty"`
	Decision []string `json:"decision,omitempty"`
	// Files are the files Job.Collect named, path (relative to the
	// scratch directory) to content, encoded on the wire as Job.Files.
	Files map[string]string `json:"files,omitempty"`
	// FilesSkipped says, one "path: reason" line each, what matched
	// Job.Collect and was left out (a link, not a regular file, over the
	// size cap) and which patterns matched nothing.
	FilesSkipped []string `json:"files_skipped,omitempty"`
	// Replica names the server replica that ran the job (its replica_id);
	// empty when the job ran in the caller's process.
	Replica string `json:"replica,omitempty"`
}

// Stop says why a run was stopped before it finished.
type Stop struct {
	Reason StopReason `json:"reason"`
	Detail string     `json:"detail,omitempty"`
}

// StopReason names the limit or policy that stopped a run.
type StopReason string

// The stop reasons.
const (
	StopTimeout StopReason = "timeout" // the wall clock ran out
	StopCPU     StopReason = "cpu"     // the CPU-time limit ran out
	StopMemory  StopReason = "memory"  // the memory limit was reached
	StopSteps   StopReason = "steps"   // the interpreter step budget ran out
	StopOutput  StopReason = "output"  // output exceeded its cap
	StopPids    StopReason = "pids"    // the process limit was reached
	StopDenied  StopReason = "denied"  // a withheld capability was attempted
	StopKilled  StopReason = "killed"  // killed from outside (cancelled, or a signal)
)

// ErrorInfo is the wire form of an error that ended a run.
type ErrorInfo struct {
	Kind    ErrorKind `json:"kind"`
	Message string    `json:"message"`
}

// ErrorKind classifies an error that ended a run.
type ErrorKind string

// The error kinds.
const (
	ErrInvalid     ErrorKind = "invalid"      // the job itself is malformed
	ErrCompile     ErrorKind = "compile"      // the code does not compile
	ErrRuntime     ErrorKind = "runtime"      // the code failed while running
	ErrNotAdmitted ErrorKind = "not_admitted" // no tier may run the job
	ErrInternal    ErrorKind = "internal"     // airlock itself failed
)

// Timings are in microseconds: start is the time to get an instance ready
// (compile, create a sandbox, claim from a pool), run the time the code ran,
// total everything from the call to the result.
type Timings struct {
	StartUS int64 `json:"start_us"`
	RunUS   int64 `json:"run_us"`
	TotalUS int64 `json:"total_us"`
}

// Usage is what a run consumed, as far as the tier can measure it.
type Usage struct {
	Steps       int64 `json:"steps,omitempty"`
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
	OutputBytes int64 `json:"output_bytes,omitempty"` // kept: at most limits.output_bytes
	CPUUS       int64 `json:"cpu_us,omitempty"`
}

// SetError records err in the result's wire fields: a [*Stop] or
// [*Denied] becomes Stopped, anything else becomes Error. A stopped run
// did not end by itself, so it has no exit status: ExitCode is 0 on every
// tier, whatever the tier did to stop it (a kill's 137, a CPU limit's
// signal). A nil err clears nothing.
func (r *Result) SetError(err error) {
	if err == nil {
		return
	}
	if s, ok := AsStop(err); ok {
		r.Stopped = &s
		r.ExitCode = 0
		return
	}
	r.Error = &ErrorInfo{Kind: KindOf(err), Message: err.Error()}
}

// Err rebuilds a typed error from a result's wire fields, for clients that
// received a Result as JSON. It returns nil for a run that was neither
// stopped nor failed.
func (r *Result) Err() error {
	switch {
	case r.Stopped != nil && r.Stopped.Reason == StopDenied:
		capability, detail := splitDenied(r.Stopped.Detail)
		return &Denied{Capability: capability, Detail: detail}
	case r.Stopped != nil:
		return &Stop{Reason: r.Stopped.Reason, Detail: r.Stopped.Detail}
	case r.Error == nil:
		return nil
	}
	// The message is the error's whole text (SetError): the error rebuilt
	// reads the same, its kind's words not said twice.
	msg := r.Error.Message
	switch r.Error.Kind {
	case ErrInvalid:
		return &InvalidJob{Reason: strings.TrimPrefix(msg, "invalid job: ")}
	case ErrCompile, ErrRuntime:
		words := (&ErrorInfo{Kind: r.Error.Kind}).Error() // "compile error: "
		return &ErrorInfo{Kind: r.Error.Kind, Message: strings.TrimPrefix(msg, words)}
	case ErrNotAdmitted:
		if rest, ok := strings.CutPrefix(msg, "not admitted by "); ok {
			if tier, reason, ok := strings.Cut(rest, ": "); ok && tier != "" && !strings.ContainsAny(tier, " :") {
				return &NotAdmitted{Tier: tier, Reason: reason}
			}
		}
		return &NotAdmitted{Reason: strings.TrimPrefix(msg, "not admitted: ")}
	}
	return &remoteError{msg}
}

type remoteError struct{ msg string }

func (e *remoteError) Error() string { return e.msg }
