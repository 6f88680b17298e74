package airlock

import (
	"errors"
	"fmt"
	"strings"
)

// Error makes a *Stop the error a run returns when it was stopped by a
// limit, a cancellation or a signal before it finished.
func (e *Stop) Error() string {
	if e.Detail == "" {
		return "stopped: " + string(e.Reason)
	}
	return "stopped: " + string(e.Reason) + ": " + e.Detail
}

// Denied is returned when the code attempted a capability its job was not
// granted. Capability names the class ("fs", "net", "spawn", "secrets",
// "host-function", "syscall"), Detail what was attempted.
type Denied struct {
	Capability string
	Detail     string
}

func (e *Denied) Error() string {
	if e.Detail == "" {
		return "denied: " + e.Capability
	}
	return "denied: " + e.Capability + ": " + e.Detail
}

// NotAdmitted is returned when a tier cannot enforce everything a job needs,
// or when no tier at the job's minimum level may run it.
type NotAdmitted struct {
	Tier   string // the tier that refused, or "" for the router
	Reason string
}

func (e *NotAdmitted) Error() string {
	if e.Tier == "" {
		return "not admitted: " + e.Reason
	}
	return "not admitted by " + e.Tier + ": " + e.Reason
}

// InvalidJob is returned for a malformed job. Field names the offending
// wire field ("limits.wall_ms", "files[a/../b]") where one is to blame.
type InvalidJob struct {
	Field  string
	Reason string
}

func (e *InvalidJob) Error() string {
	if e.Field == "" {
		return "invalid job: " + e.Reason
	}
	return "invalid job: " + e.Field + ": " + e.Reason
}

// Error makes an *ErrorInfo the error a run returns when the job's own
// code fails: it does not compile (Kind ErrCompile) or it raised an error
// while running (Kind ErrRuntime).
func (e *ErrorInfo) Error() string {
	switch e.Kind {
	case ErrCompile:
		return "compile error: " + e.Message
	case ErrRuntime:
		return "runtime error: " + e.Message
	}
	return e.Message
}

// invalid returns an [*InvalidJob] for field.
func invalid(field, format string, args ...any) error {
	return &InvalidJob{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// AsStop reports the stop an error stands for: a [*Stop], or a
// [*Denied] as a stop with reason "denied".
func AsStop(err error) (Stop, bool) {
	var s *Stop
	if errors.As(err, &s) {
		return Stop{Reason: s.Reason, Detail: s.Detail}, true
	}
	var d *Denied
	if errors.As(err, &d) {
		detail := d.Capability
		if d.Detail != "" {
			detail += ": " + d.Detail
		}
		return Stop{Reason: StopDenied, Detail: detail}, true
	}
	return Stop{}, false
}

func splitDenied(detail string) (capability, rest string) {
	capability, rest, _ = strings.Cut(detail, ": ")
	return capability, rest
}

// KindOf classifies an error for the wire. Errors that are not airlock's
// own types are internal.
func KindOf(err error) ErrorKind {
	var (
		inv *InvalidJob
		ce  *ErrorInfo
		na  *NotAdmitted
	)
	switch {
	case errors.As(err, &inv):
		return ErrInvalid
	case errors.As(err, &ce):
		return ce.Kind
	case errors.As(err, &na):
		return ErrNotAdmitted
	}
	return ErrInternal
}

// reasonCredentials is the reason every tier below level 5 gives for not
// admitting a job with grants.credentials: only an executor under the
// account that holds them resolves them.
const reasonCredentials = "grants.credentials are resolved only at level 5 (the account tier, under the account that holds them)"

// reasonAccount is the reason every tier below level 5 gives for not
// admitting a job that names an account.
const reasonAccount = "a job naming an account runs only at level 5 (the account tier)"
