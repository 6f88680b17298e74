package airlock

import (
	"encoding/json"
	"time"

	"github.com/airlock-sandbox/airlock/internal/jsonappend"
	"github.com/airlock-sandbox/airlock/internal/wirebytes"
)

// The JSON forms of Job and Result: the same members in the same order,
// with the byte-carrying strings (files, output) in their wire form (see
// Job.Files). TestWireMirrors keeps these in step with Job and Result.

// marshal encodes without HTML escaping: the caller's encoder applies its
// own setting to what a MarshalJSON returns.
func marshal(v any) ([]byte, error) { return jsonappend.Any(nil, v, false) }

type jobWire struct {
	Kind      Kind              `json:"kind"`
	Code      string            `json:"code,omitempty"`
	Module    []byte            `json:"module,omitempty"`
	Entry     string            `json:"entry,omitempty"`
	Argv      []string          `json:"argv,omitempty"`
	Stdin     string            `json:"stdin,omitempty"`
	Input     inputWire         `json:"input,omitempty"`
	Files     filesWire         `json:"files,omitempty"`
	Collect   []string          `json:"collect,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	Image     string            `json:"image,omitempty"`
	Grants    Grants            `json:"grants,omitzero"`
	Limits    Limits            `json:"limits,omitzero"`
	Clock     time.Time         `json:"clock,omitzero"`
	Seed      uint64            `json:"seed,omitempty"`
	Situation Situation         `json:"situation,omitempty"`
	Lifecycle Lifecycle         `json:"lifecycle,omitempty"`
	Session   string            `json:"session,omitempty"`
	Tier      string            `json:"tier,omitempty"`
	Account   string            `json:"account,omitempty"`
}

func (j *Job) wire() jobWire {
	return jobWire{j.Kind, j.Code, j.Module, j.Entry, j.Argv, j.Stdin, inputWire(j.Input), filesWire(j.Files), j.Collect, j.Env, j.Image,
		j.Grants, j.Limits, j.Clock, j.Seed, j.Situation, j.Lifecycle, j.Session, j.Tier, j.Account}
}

func (w *jobWire) job() Job {
	return Job{w.Kind, w.Code, w.Module, w.Entry, w.Argv, w.Stdin, map[string]any(w.Input), map[string]string(w.Files), w.Collect, w.Env, w.Image,
		w.Grants, w.Limits, w.Clock, w.Seed, w.Situation, w.Lifecycle, w.Session, w.Tier, w.Account}
}

// MarshalJSON writes the job in the v1 wire format.
func (j Job) MarshalJSON() ([]byte, error) { return marshal(j.wire()) }

// UnmarshalJSON reads the v1 wire format leniently (unknown members are
// ignored); [DecodeJob] is the strict reader for jobs from outside.
func (j *Job) UnmarshalJSON(data []byte) error {
	var w jobWire
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	*j = w.job()
	return nil
}

// inputWire is Job.Input on the wire: a whole float keeps its ".0", so
// that the job read back (by DecodeJob: a replay, an audit record) gives
// the program the float it was given, not an integer.
type inputWire map[string]any

func (in inputWire) MarshalJSON() ([]byte, error) {
	if in == nil {
		return []byte("null"), nil
	}
	return jsonappend.Typed(nil, map[string]any(in), false)
}

// filesWire is Job.Files on the wire; a malformed value is an
// [*InvalidJob] for "files".
type filesWire map[string]string

func (f filesWire) MarshalJSON() ([]byte, error) { return wirebytes.Map(f).MarshalJSON() }

func (f *filesWire) UnmarshalJSON(data []byte) error {
	m, err := wirebytes.DecodeMap(data)
	if err != nil {
		return invalid("files", "%s", err.Error())
	}
	*f = m
	return nil
}

type resultWire struct {
	Tier         string         `json:"tier"`
	Level        Level          `json:"level"`
	Value        any            `json:"value"`
	Stdout       wirebytes.Text `json:"stdout"`
	Stderr       wirebytes.Text `json:"stderr"`
	ExitCode     int            `json:"exit_code"`
	Stopped      *Stop          `json:"stopped,omitempty"`
	Error        *ErrorInfo     `json:"error,omitempty"`
	Timings      Timings        `json:"timings"`
	Usage        Usage          `json:"usage,omitzero"`
	Clock        time.Time      `json:"clock,omitzero"`
	Seed         uint64         `json:"seed,omitempty"`
	Image        string         `json:"image,omitempty"`
	Decision     []string       `json:"decision,omitempty"`
	Files        wirebytes.Map  `json:"files,omitempty"`
	FilesSkipped []string       `json:"files_skipped,omitempty"`
	Replica      string         `json:"replica,omitempty"`
}

// MarshalJSON writes the result in the v1 wire format.
func (r Result) MarshalJSON() ([]byte, error) {
	return marshal(resultWire{r.Tier, r.Level, r.Value, wirebytes.Text(r.Stdout), wirebytes.Text(r.Stderr), r.ExitCode, r.Stopped, r.Error,
		r.Timings, r.Usage, r.Clock, r.Seed, r.Image, r.Decision, wirebytes.Map(r.Files), r.FilesSkipped, r.Replica})
}

// UnmarshalJSON reads the v1 wire format.
func (r *Result) UnmarshalJSON(data []byte) error {
	var w resultWire
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	*r = Result{w.Tier, w.Level, w.Value, string(w.Stdout), string(w.Stderr), w.ExitCode, w.Stopped, w.Error,
		w.Timings, w.Usage, w.Clock, w.Seed, w.Image, w.Decision, map[string]string(w.Files), w.FilesSkipped, w.Replica}
	return nil
}
