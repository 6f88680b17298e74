// Package wasm is airlock's WebAssembly tier and plugin host, on wazero.
//
// The [Tier] runs kind "wasm" jobs: a fresh module instance per run, with
// its clocks pinned to the job's clock, random_get seeded by the job's
// seed, linear memory capped by limits.memory_mb, tables capped, output
// capped, the wall clock enforced even inside a loop with no calls (wazero's
// close-on-context-done), and WASI filesystem access only to the job's
// read-only grants and an in-memory scratch. Compiled modules are cached by
// content hash, in memory and optionally on disk.
//
// The [Host] runs WASM tools for Go programs: load a tool once, call it
// many times with bytes in and bytes out, each call in a fresh instance,
// with host functions granted by name. See docs/wasm.md for the guest ABI.
package wasm

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/tetratelabs/wazero/api"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/jobs"
	"github.com/airlock-sandbox/airlock/internal/monotime"
)

// Name is the tier's name.
const Name = "wasm"

// Tier runs WebAssembly jobs. It is safe for concurrent use.
type Tier struct {
	e *engine
}

var _ airlock.Tier = (*Tier)(nil)

// New builds a tier from cfg.
func New(cfg Config) (*Tier, error) {
	e, err := newEngine(cfg)
	if err != nil {
		return nil, err
	}
	return &Tier{e: e}, nil
}

// Close releases the runtime and its compiled modules.
func (t *Tier) Close() error { return t.e.close() }

// Name implements airlock.Tier.
func (t *Tier) Name() string { return Name }

// Level implements airlock.Tier.
func (t *Tier) Level() airlock.Level { return airlock.LevelInterpreter }

// Admit refuses what the tier cannot enforce: jobs of another kind,
// process spawning, sessions (each run is a fresh instance), and read
// grants of /, /proc, /sys or /dev.
func (t *Tier) Admit(job airlock.Job) error {
	switch {
	case job.Kind != airlock.KindWasm:
		return &airlock.NotAdmitted{Tier: Name, Reason: "runs only kind wasm, not " + strconv.Quote(string(job.Kind))}
	case job.Grants.Spawn:
		return &airlock.NotAdmitted{Tier: Name, Reason: "a WebAssembly module cannot spawn processes"}
	case job.Lifecycle == airlock.LifecycleSession || job.Lifecycle == airlock.LifecyclePersistent:
		return &airlock.NotAdmitted{Tier: Name, Reason: "sessions are not supported: every run is a fresh instance"}
	}
	memory := job.Limits.MemoryMB
	if memory == 0 {
		memory = t.e.cfg.limits.Default.MemoryMB
	}
	if job.Grants.FS.ScratchMB > memory && memory > 0 {
		// The scratch is held in this process's memory, beside the
		// module's: it may not be larger than the job may use.
		return &airlock.NotAdmitted{Tier: Name, Reason: fmt.Sprintf("grants.fs.scratch_mb (%d) is above limits.memory_mb (%d): the scratch is held in memory", job.Grants.FS.ScratchMB, memory)}
	}
	for _, p := range job.Grants.FS.Read {
		if err := checkReadGrant(p); err != nil {
			return &airlock.NotAdmitted{Tier: Name, Reason: err.Error()}
		}
		if job.Grants.FS.At[p] == "/" && !slices.Contains(job.Grants.FS.Copy, p) && wantsScratch(&job) {
			return &airlock.NotAdmitted{Tier: Name, Reason: "read grant " + p + " at / would hide the scratch, which is mounted at / (a read-only grant may take / only in a job without files, collect, copies or scratch_mb)"}
		}
	}
	return nil
}

// wantsScratch reports whether the job's run has the in-memory scratch at
// "/": for its files, what it collects, its size, or copied grants.
func wantsScratch(job *airlock.Job) bool {
	return job.Grants.FS.ScratchMB > 0 || len(job.Files) > 0 || len(job.Collect) > 0 || len(job.Grants.FS.Copy) > 0
}

// Run implements airlock.Tier.
func (t *Tier) Run(ctx context.Context, job airlock.Job) (res airlock.Result, err error) {
	t0 := time.Now()
	res = airlock.Result{Tier: Name, Level: airlock.LevelInterpreter}
	defer func() {
		res.Timings.TotalUS = max(monotime.Micros(t0), res.Timings.RunUS+res.Timings.StartUS, 1)
		res.SetError(err)
	}()
	job, err = t.e.cfg.limits.Prepare(job)
	res.Clock, res.Seed = job.Clock, job.Seed
	if err != nil {
		return res, err
	}
	if err = t.Admit(job); err != nil {
		return res, err
	}
	// Compiling has its own cap (WithCompileTimeout); the wall clock is
	// the run's, which starts once the module is compiled.
	c, err := t.e.acquire(ctx, job.Module)
	if err != nil {
		return res, err
	}
	defer t.e.release(c)
	s, err := t.spec(&job, c)
	if err != nil {
		return res, err
	}
	doer, done, err := t.e.cfg.doer(ctx, job.Grants.Net)
	if err != nil {
		return res, err
	}
	defer func() { res.Decision = append(res.Decision, done()...) }()
	s.host.http = doer
	s.sink = airlock.OutputSink(ctx)
	res.Timings.StartUS = monotime.Micros(t0)
	out, err := t.e.run(ctx, c, s)
	res.Timings.StartUS += out.start.Microseconds()
	res.Timings.RunUS = out.run.Microseconds()
	res.Stdout, res.Stderr, res.ExitCode = out.stdout, out.stderr, out.exitCode
	res.Usage = airlock.Usage{MemoryBytes: int64(out.memPeak), OutputBytes: out.outBytes}
	if len(job.Collect) > 0 {
		// The guest has ended (also when stopped): its scratch is read back.
		res.Files, res.FilesSkipped = s.fs.collected(job.Collect)
	}
	if err == nil && job.Entry != "" {
		res.Value = resultValue(c, job.Entry, out.results)
	}
	return res, err
}

// spec translates a prepared job into a run spec.
func (t *Tier) spec(job *airlock.Job, c *compiled) (*spec, error) {
	s := &spec{
		args:     append([]string{"module.wasm"}, job.Argv...),
		env:      environment(job),
		stdin:    job.Stdin,
		entry:    job.Entry,
		memLimit: uint64(job.Limits.MemoryMB) << 20,
		wall:     job.Limits.Wall(),
		clock:    job.Clock,
		seed:     job.Seed,
		outCap:   job.Limits.OutputBytes,
		fs: fsSpec{
			read:    job.Grants.FS.Read,
			at:      job.Grants.FS.At,
			copy:    job.Grants.FS.Copy,
			scratch: wantsScratch(job),
			files:   job.Files,
			mtime:   job.Clock.UnixNano(),
		},
		host: &hostState{
			grants:  map[string]bool{FuncLog: true, FuncHTTPRequest: true},
			input:   []byte(job.Stdin),
			net:     job.Grants.Net,
			http:    t.e.cfg.http,
			respCap: job.Limits.OutputBytes,
			toStd:   true,
		},
	}
	s.fs.scratchMax = job.Grants.FS.ScratchMB << 20
	if s.fs.scratchMax == 0 {
		s.fs.scratchMax = DefaultScratchMB << 20
	}
	if job.Entry != "" && job.Entry != "_start" {
		params, err := entryParams(c, job)
		if err != nil {
			return nil, err
		}
		s.params = params
	} else {
		s.entry = ""
	}
	return s, nil
}

// environment is the guest's environment: the job's env and its secrets
// (Validate refuses a name in both).
func environment(job *airlock.Job) map[string]string {
	if len(job.Env) == 0 {
		return job.Grants.Secrets
	}
	env := make(map[string]string, len(job.Env)+len(job.Grants.Secrets))
	maps.Copy(env, job.Env)
	maps.Copy(env, job.Grants.Secrets)
	return env
}

// entryParams reads an exported function's arguments from input.args (a
// list of numbers) or, failing that, from argv.
func entryParams(c *compiled, job *airlock.Job) ([]uint64, error) {
	def, ok := exportedFunc(c.mod, job.Entry)
	if !ok {
		return nil, jobs.Invalid("entry", "module exports no function %q", job.Entry)
	}
	var raw []any
	if a, ok := job.Input["args"]; ok {
		list, ok := a.([]any)
		if !ok {
			return nil, jobs.Invalid("input.args", "must be a list of numbers")
		}
		raw = list
	} else {
		for _, a := range job.Argv {
			raw = append(raw, a)
		}
	}
	types := def.ParamTypes()
	if len(raw) != len(types) {
		return nil, jobs.Invalid("input.args", "%s takes %d arguments, got %d", job.Entry, len(types), len(raw))
	}
	params := make([]uint64, len(types))
	for i, typ := range types {
		p, err := encodeParam(typ, raw[i])
		if err != nil {
			return nil, jobs.Invalid("input.args", "argument %d: %v", i, err)
		}
		params[i] = p
	}
	return params, nil
}

func encodeParam(typ api.ValueType, v any) (uint64, error) {
	var f float64
	var isInt bool
	var n int64
	switch x := v.(type) {
	case int64:
		n, isInt = x, true
	case int:
		n, isInt = int64(x), true
	case float64:
		f = x
	case string:
		if i, err := strconv.ParseInt(x, 0, 64); err == nil {
			n, isInt = i, true
		} else if g, err := strconv.ParseFloat(x, 64); err == nil {
			f = g
		} else {
			return 0, fmt.Errorf("%q is not a number", x)
		}
	default:
		return 0, fmt.Errorf("%v (%T) is not a number", v, v)
	}
	switch typ {
	case api.ValueTypeI32:
		if !isInt || n < math.MinInt32 || n > math.MaxUint32 {
			return 0, fmt.Errorf("%v is not a 32-bit integer", v)
		}
		return api.EncodeI32(int32(n)), nil
	case api.ValueTypeI64:
		if !isInt {
			return 0, fmt.Errorf("%v is not an integer", v)
		}
		return api.EncodeI64(n), nil
	case api.ValueTypeF32:
		if isInt {
			f = float64(n)
		}
		return api.EncodeF32(float32(f)), nil
	case api.ValueTypeF64:
		if isInt {
			f = float64(n)
		}
		return api.EncodeF64(f), nil
	}
	return 0, fmt.Errorf("parameter type %s is not a number", api.ValueTypeName(typ))
}

// resultValue converts an exported function's results to a Value: nil for
// none, a number for one, a list for several.
func resultValue(c *compiled, entry string, results []uint64) any {
	def, ok := exportedFunc(c.mod, entry)
	if !ok || len(results) == 0 {
		return nil
	}
	vals := make([]any, len(results))
	for i, typ := range def.ResultTypes() {
		switch typ {
		case api.ValueTypeI32:
			vals[i] = int64(api.DecodeI32(results[i]))
		case api.ValueTypeI64:
			vals[i] = int64(results[i])
		case api.ValueTypeF32:
			vals[i] = finite(float64(api.DecodeF32(results[i])))
		case api.ValueTypeF64:
			vals[i] = finite(api.DecodeF64(results[i]))
		default:
			vals[i] = nil
		}
	}
	if len(vals) == 1 {
		return vals[0]
	}
	return vals
}

// finite maps NaN and infinities, which JSON cannot carry, to their names.
func finite(f float64) any {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return strconv.FormatFloat(f, 'g', -1, 64)
	}
	return f
}
