package server

import (
	"encoding/base64"
	"strconv"

	"github.com/airlock-sandbox/airlock/internal/jsonappend"
	"github.com/airlock-sandbox/airlock/internal/wirebytes"

	"github.com/airlock-sandbox/airlock"
)

// This file encodes the hot path's JSON — a run's Result and an audit
// Record — by appending, without reflection (values and strings through
// package jsonappend). The output is byte for byte what encoding/json
// writes for the same value with HTML escaping off; what is not a common
// simple case (a time outside UTC or years 0–9999, a grant)
// is handed to encoding/json. TestEncodersMatchEncodingJSON holds them to
// that.

// field appends a member's key, with the comma before every member but
// the first (b ends in '{' before the first).
func field(b []byte, key string) []byte {
	if b[len(b)-1] != '{' {
		b = append(b, ',')
	}
	b = append(b, '"')
	b = append(b, key...)
	return append(b, '"', ':')
}

func appendInt(b []byte, key string, v int64) []byte {
	return strconv.AppendInt(field(b, key), v, 10)
}

// appendOmit appends a non-zero integer member (omitempty).
func appendOmit(b []byte, key string, v int64) []byte {
	if v == 0 {
		return b
	}
	return appendInt(b, key, v)
}

func appendStr(b []byte, key, s string) []byte {
	return jsonappend.String(field(b, key), s, false)
}

// appendStrOmit appends a non-empty string member (omitempty).
func appendStrOmit(b []byte, key, s string) []byte {
	if s == "" {
		return b
	}
	return appendStr(b, key, s)
}

func appendLimits(b []byte, l airlock.Limits) []byte {
	b = append(b, '{')
	b = appendOmit(b, "wall_ms", l.WallMS)
	b = appendOmit(b, "cpu_ms", l.CPUMS)
	b = appendOmit(b, "memory_mb", l.MemoryMB)
	b = appendOmit(b, "output_bytes", l.OutputBytes)
	b = appendOmit(b, "pids", l.Pids)
	b = appendOmit(b, "files", l.Files)
	b = appendOmit(b, "steps", l.Steps)
	return append(b, '}')
}

func appendTimings(b []byte, t airlock.Timings) []byte {
	b = append(b, '{')
	b = appendInt(b, "start_us", t.StartUS)
	b = appendInt(b, "run_us", t.RunUS)
	b = appendInt(b, "total_us", t.TotalUS)
	return append(b, '}')
}

func appendStop(b []byte, s *airlock.Stop) []byte {
	b = append(b, '{')
	b = appendStr(b, "reason", string(s.Reason))
	b = appendStrOmit(b, "detail", s.Detail)
	return append(b, '}')
}

// grantsZero is what omitzero tests: every field its zero value (a
// non-nil empty slice or map is not zero).
func grantsZero(g *airlock.Grants) bool {
	return g.FS.Read == nil && g.FS.At == nil && g.FS.Copy == nil && g.FS.ScratchMB == 0 && g.Net == nil && !g.Spawn && g.Secrets == nil && g.Credentials == nil
}

// appendResult appends a Result as encoding/json writes it.
func appendResult(b []byte, r *airlock.Result) ([]byte, error) {
	var err error
	b = append(b, '{')
	b = appendStr(b, "tier", r.Tier)
	b = appendInt(b, "level", int64(r.Level))
	if b, err = jsonappend.Value(field(b, "value"), r.Value, false); err != nil {
		return b, err
	}
	b = wirebytes.Append(field(b, "stdout"), r.Stdout, false)
	b = wirebytes.Append(field(b, "stderr"), r.Stderr, false)
	b = appendInt(b, "exit_code", int64(r.ExitCode))
	if r.Stopped != nil {
		b = appendStop(field(b, "stopped"), r.Stopped)
	}
	if r.Error != nil {
		b = append(field(b, "error"), '{')
		b = appendStr(b, "kind", string(r.Error.Kind))
		b = appendStr(b, "message", r.Error.Message)
		b = append(b, '}')
	}
	b = appendTimings(field(b, "timings"), r.Timings)
	if u := r.Usage; u != (airlock.Usage{}) {
		b = append(field(b, "usage"), '{')
		b = appendOmit(b, "steps", u.Steps)
		b = appendOmit(b, "memory_bytes", u.MemoryBytes)
		b = appendOmit(b, "output_bytes", u.OutputBytes)
		b = appendOmit(b, "cpu_us", u.CPUUS)
		b = append(b, '}')
	}
	if !r.Clock.IsZero() {
		if b, err = jsonappend.Time(field(b, "clock"), r.Clock); err != nil {
			return b, err
		}
	}
	if r.Seed != 0 {
		b = strconv.AppendUint(field(b, "seed"), r.Seed, 10)
	}
	b = appendStrOmit(b, "image", r.Image)
	if len(r.Decision) > 0 {
		b = jsonappend.Strings(field(b, "decision"), r.Decision)
	}
	if len(r.Files) > 0 {
		b = wirebytes.AppendMap(field(b, "files"), r.Files, false)
	}
	if len(r.FilesSkipped) > 0 {
		b = jsonappend.Strings(field(b, "files_skipped"), r.FilesSkipped)
	}
	b = appendStrOmit(b, "replica", r.Replica)
	return append(b, '}'), nil
}

// appendJob appends a Job as encoding/json writes it.
func appendJob(b []byte, j *airlock.Job) ([]byte, error) {
	var err error
	b = append(b, '{')
	b = appendStr(b, "kind", string(j.Kind))
	b = appendStrOmit(b, "code", j.Code)
	if len(j.Module) > 0 {
		b = append(field(b, "module"), '"')
		b = base64.StdEncoding.AppendEncode(b, j.Module)
		b = append(b, '"')
	}
	b = appendStrOmit(b, "entry", j.Entry)
	if len(j.Argv) > 0 {
		b = jsonappend.Strings(field(b, "argv"), j.Argv)
	}
	b = appendStrOmit(b, "stdin", j.Stdin)
	if len(j.Input) > 0 {
		if b, err = jsonappend.Value(field(b, "input"), j.Input, false); err != nil {
			return b, err
		}
	}
	if len(j.Files) > 0 {
		b = wirebytes.AppendMap(field(b, "files"), j.Files, false)
	}
	if len(j.Collect) > 0 {
		b = jsonappend.Strings(field(b, "collect"), j.Collect)
	}
	if len(j.Env) > 0 {
		if b, err = jsonappend.Any(field(b, "env"), j.Env, false); err != nil {
			return b, err
		}
	}
	b = appendStrOmit(b, "image", j.Image)
	if !grantsZero(&j.Grants) {
		if b, err = jsonappend.Any(field(b, "grants"), j.Grants, false); err != nil {
			return b, err
		}
	}
	if j.Limits != (airlock.Limits{}) {
		b = appendLimits(field(b, "limits"), j.Limits)
	}
	if !j.Clock.IsZero() {
		if b, err = jsonappend.Time(field(b, "clock"), j.Clock); err != nil {
			return b, err
		}
	}
	if j.Seed != 0 {
		b = strconv.AppendUint(field(b, "seed"), j.Seed, 10)
	}
	b = appendStrOmit(b, "situation", string(j.Situation))
	b = appendStrOmit(b, "lifecycle", string(j.Lifecycle))
	b = appendStrOmit(b, "session", j.Session)
	b = appendStrOmit(b, "tier", j.Tier)
	b = appendStrOmit(b, "account", j.Account)
	return append(b, '}'), nil
}

// appendRecord appends an audit Record as encoding/json writes it, without
// the newline.
func appendRecord(b []byte, r *Record) ([]byte, error) {
	var err error
	b = append(b, '{')
	if b, err = jsonappend.Time(field(b, "time"), r.Time); err != nil {
		return b, err
	}
	b = appendStr(b, "tenant", r.Tenant)
	b = appendStr(b, "request", r.Request)
	b = appendStrOmit(b, "session", r.Session)
	b = appendStrOmit(b, "replica", r.Replica)
	b = appendStr(b, "digest", string(r.Digest))
	b = appendStrOmit(b, "approval", r.Approval)
	b = appendStrOmit(b, "approver", r.Approver)
	b = appendStrOmit(b, "reason", r.Reason)
	b = appendStr(b, "tier", r.Tier)
	b = appendStrOmit(b, "image", r.Image)
	if len(r.Decision) > 0 {
		b = jsonappend.Strings(field(b, "decision"), r.Decision)
	}
	if !grantsZero(&r.Grants) {
		if b, err = jsonappend.Any(field(b, "grants"), r.Grants, false); err != nil {
			return b, err
		}
	}
	b = appendLimits(field(b, "limits"), r.Limits)
	if !r.Clock.IsZero() {
		if b, err = jsonappend.Time(field(b, "clock"), r.Clock); err != nil {
			return b, err
		}
	}
	if r.Seed != 0 {
		b = strconv.AppendUint(field(b, "seed"), r.Seed, 10)
	}
	if len(r.Egress) > 0 {
		b = jsonappend.Strings(field(b, "egress"), r.Egress)
	}
	b = appendStr(b, "outcome", r.Outcome)
	if r.Stopped != nil {
		b = appendStop(field(b, "stopped"), r.Stopped)
	}
	b = appendStrOmit(b, "error", r.Error)
	b = appendInt(b, "exit_code", int64(r.ExitCode))
	b = appendTimings(field(b, "timings"), r.Timings)
	b = appendInt(b, "queue_us", r.QueueUS)
	b = appendStr(b, "output", r.Output)
	if r.Job != nil {
		if b, err = appendJob(field(b, "job"), r.Job); err != nil {
			return b, err
		}
	}
	return append(b, '}'), nil
}
