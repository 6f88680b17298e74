// Package expr is airlock's expression tier: expr-lang/expr hardened so
// that no input can crash, hang or exhaust the host process.
//
// What it adds to the library, and why (each is a reproduced failure of the
// plain library, kept as a case in corpus/expr.jsonl):
//
//   - input size and bracket nesting are bounded before the parser recurses,
//     and the tree's depth before the checker and compiler recurse (deep
//     nesting is otherwise a fatal, unrecoverable stack overflow);
//   - an allowlist of node kinds, builtins and functions: no method calls on
//     values, no $env, no timezone database, no reserved names;
//   - a memory budget that also counts strings and every collection a
//     builtin returns, checked before allocating where an operation can
//     multiply its input (repeat, +, join, replace, concat, flatten, toJSON,
//     split, and a matches pattern made at run time);
//   - a step budget and the wall clock checked on every predicate
//     iteration, so nested count/map/filter over ranges stop at the
//     deadline;
//   - now() pinned to the job's clock;
//   - builtins whose overloaded signatures make type checking exponential
//     replaced by plainly typed ones.
//
// Compiled programs are cached (bounded) by their source.
package expr

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/vm"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/cache"
	"github.com/airlock-sandbox/airlock/internal/jobs"
	"github.com/airlock-sandbox/airlock/internal/monotime"
	"github.com/airlock-sandbox/airlock/internal/value"
)

// Name is the tier's name.
const Name = "expr"

// Config configures the tier. It is immutable: With* methods return copies.
type Config struct {
	limits    airlock.LimitPolicy
	cacheSize int
	maxCode   int
	maxDepth  int
}

// NewConfig returns the default configuration: airlock.DefaultLimitPolicy
// but a 64 MiB memory default (an inline expression needs far less than a
// process), 4096 cached programs, 64 KiB of source, nesting 128 deep.
func NewConfig() Config {
	limits := airlock.DefaultLimitPolicy()
	limits.Default.MemoryMB = 64
	return Config{limits: limits, cacheSize: 4096, maxCode: 64 << 10, maxDepth: 128}
}

// WithLimits sets the operator's default and maximum limits.
func (c Config) WithLimits(p airlock.LimitPolicy) Config { c.limits = p; return c }

// WithCacheSize sets how many compiled programs are kept (at least 1).
func (c Config) WithCacheSize(n int) Config { c.cacheSize = max(n, 1); return c }

// WithMaxCode sets the largest accepted source, in bytes (at least 16).
func (c Config) WithMaxCode(n int) Config { c.maxCode = max(n, 16); return c }

// WithMaxDepth sets the deepest accepted nesting of brackets and of the
// syntax tree (between 8 and 1000).
func (c Config) WithMaxDepth(n int) Config { c.maxDepth = min(max(n, 8), 1000); return c }

// Tier evaluates expressions. It is safe for concurrent use.
type Tier struct {
	cfg   Config
	cache *cache.Cache[string, *program]
	last  atomic.Pointer[program] // the program last compiled or found
	vms   sync.Pool               // *vm.VM, reset by each Run
}

// New returns a tier with the default configuration.
func New() *Tier { return NewWithConfig(NewConfig()) }

// NewWithConfig returns a tier with the given configuration.
func NewWithConfig(c Config) *Tier {
	if c.cacheSize == 0 {
		c = NewConfig()
	}
	t := &Tier{cfg: c, cache: cache.New[string, *program](c.cacheSize)}
	return t
}

// Name returns "expr".
func (t *Tier) Name() string { return Name }

// Level returns airlock.LevelInterpreter.
func (t *Tier) Level() airlock.Level { return airlock.LevelInterpreter }

// Admit accepts expression jobs that are granted nothing: an expression has
// no filesystem, network, processes or credentials to use.
func (t *Tier) Admit(job airlock.Job) error { return admit(&job) }

// AdmitsInRun marks the tier as admitting in Run (see [airlock.Tier]): Run refuses, with
// Admit's *NotAdmitted and before anything else, every job Admit refuses,
// and returns *NotAdmitted for nothing else, so the router need not call
// Admit first.
func (t *Tier) AdmitsInRun() {}

func admit(job *airlock.Job) error {
	if job.Kind != airlock.KindExpr {
		return &airlock.NotAdmitted{Tier: Name, Reason: "runs only expr jobs, not " + string(job.Kind)}
	}
	if !job.Grants.Hermetic() {
		return &airlock.NotAdmitted{Tier: Name, Reason: "expressions cannot use grants (filesystem, network, spawn, secrets)"}
	}
	if len(job.Files) > 0 || len(job.Argv) > 0 || job.Stdin != "" {
		return &airlock.NotAdmitted{Tier: Name, Reason: "expressions take input variables only (no files, argv or stdin)"}
	}
	return nil
}

// Run evaluates the job's expression with its input variables.
//
// The warm path (a cached program) reads the clock twice, at the start
// and at the end, and allocates nothing beyond what the VM itself does.
func (t *Tier) Run(ctx context.Context, job airlock.Job) (res airlock.Result, err error) {
	res.Tier, res.Level = Name, airlock.LevelInterpreter
	stamp := monotime.Start()
	// Clock reads cost as much as a small expression: a cached program's
	// start (sub-microsecond) is not measured separately and counts as 0.
	var startDur time.Duration
	ran, err := t.run(ctx, &job, stamp, &startDur, &res)
	total := stamp.Elapsed()
	res.Timings.TotalUS = total.Microseconds()
	if ran {
		res.Timings.RunUS = (total - startDur).Microseconds()
	}
	if err != nil {
		res.SetError(err)
	}
	return res, err
}

// run fills res but for its total and run timings, and returns whether
// the program ran and what ended the run. job is Run's own copy, prepared
// in place; *startDur is set when the program had to be compiled.
func (t *Tier) run(ctx context.Context, job *airlock.Job, stamp monotime.Stamp, startDur *time.Duration, res *airlock.Result) (ran bool, err error) {
	// The instant is worked out only where it is used: to pin a clock
	// the job left open (as Prepare would: UTC, whole microseconds), and
	// for a budgeted program's deadline.
	if job.Clock.IsZero() {
		job.Clock = stamp.WallMicro()
	}
	// Admission comes first, as the router's Admit call would (see
	// AdmitsInRun): a job refused here has had nothing done with it.
	if err := admit(job); err != nil {
		return false, err
	}
	// The input is checked below, in the one pass over it that also
	// finds the program's variables, rather than by Validate as well.
	in := job.Input
	job.Input = nil
	err = t.cfg.limits.PrepareInPlace(job, time.Time{})
	job.Input = in
	res.Clock, res.Seed = job.Clock, job.Seed
	if err != nil {
		return false, err
	}
	p, cached, err := t.compile(job.Code)
	if err != nil {
		return false, err
	}
	if err := checkInput(in, p.idents); err != nil {
		return false, err
	}
	if !cached {
		*startDur = stamp.Elapsed()
		res.Timings.StartUS = startDur.Microseconds()
	}

	var env any = job.Input
	var st *state
	if p.needsState {
		st = newState(ctx, job, stamp.Time().Add(*startDur))
		defer st.release()
		m := make(map[string]any, len(job.Input)+1)
		for k, v := range job.Input {
			m[k] = v
		}
		m[stateVar] = st
		env = m
	} else if job.Input == nil {
		env = map[string]any(nil)
	}
	machine, _ := t.vms.Get().(*vm.VM)
	if machine == nil {
		machine = new(vm.VM)
	}
	machine.MemoryBudget = uint(job.Limits.MemoryMB << 20 / elementBytes)
	out, err := machine.Run(p.prog, env)
	t.vms.Put(machine)
	if st != nil {
		res.Usage.Steps = st.steps
		res.Usage.MemoryBytes = st.bytes
	}
	if err != nil {
		return true, runError(err, job.Limits)
	}
	if ctx.Err() != nil {
		return true, &airlock.Stop{Reason: airlock.StopKilled, Detail: "cancelled"}
	}
	if _, ok := sizeWithin(out, job.Limits.OutputBytes, nil); !ok {
		return true, &airlock.Stop{Reason: airlock.StopOutput, Detail: fmt.Sprintf("value larger than %d bytes", job.Limits.OutputBytes)}
	}
	v, err := value.Export(out)
	if err != nil {
		return true, &airlock.ErrorInfo{Kind: airlock.ErrRuntime, Message: err.Error()}
	}
	res.Value = v
	return true, nil
}

// checkInput does for the input what Validate would (every value
// JSON-compatible), refuses the reserved variable, and checks that every
// variable the program reads is there, in one pass over the map.
func checkInput(in map[string]any, idents []string) error {
	if len(in) == len(idents) && len(idents) <= 4 {
		// The common case, the input holding just the program's variables,
		// needs no iteration (which draws a random start every time):
		// when every variable is found, they are all the keys there are,
		// and none is reserved (the compiler refuses names beginning "__").
		ok := true
		for _, name := range idents {
			v, found := in[name]
			if !found {
				ok = false
				break
			}
			switch v.(type) {
			case nil, bool, string, int, int64: // plain scalars: nothing to check
			default:
				if err := value.Check(v, 1); err != nil {
					return jobs.Invalid("input", "%s", err.Error())
				}
			}
		}
		if ok {
			return nil
		}
	}
	found := 0
	scan := len(idents) <= 8 // beyond that, look each one up instead
	for k, v := range in {
		if err := value.Check(v, 1); err != nil {
			return jobs.Invalid("input", "%s", err.Error())
		}
		if k == stateVar {
			return jobs.Invalid("input", "variable name %q is reserved", stateVar)
		}
		if scan {
			for _, name := range idents {
				if name == k {
					found++
					break
				}
			}
		}
	}
	if found == len(idents) {
		return nil
	}
	for _, name := range idents {
		if _, ok := in[name]; !ok {
			return &airlock.ErrorInfo{Kind: airlock.ErrRuntime, Message: fmt.Sprintf("unknown variable %q (not in input)", name)}
		}
	}
	return nil
}

// runError classifies an error from the VM.
func runError(err error, l airlock.Limits) error {
	var stop *airlock.Stop
	if errors.As(err, &stop) {
		return stop
	}
	var ce *airlock.ErrorInfo
	if errors.As(err, &ce) {
		return ce
	}
	msg := err.Error()
	var fe *file.Error
	if errors.As(err, &fe) {
		msg = fe.Message
	}
	if strings.Contains(msg, "memory budget exceeded") {
		return &airlock.Stop{Reason: airlock.StopMemory, Detail: fmt.Sprintf("memory budget of %d MiB exceeded", l.MemoryMB)}
	}
	return &airlock.ErrorInfo{Kind: airlock.ErrRuntime, Message: oneLine(err.Error())}
}

func oneLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

// program is a compiled expression and what running it needs.
type program struct {
	code       string // the source, the cache's key
	prog       *vm.Program
	needsState bool     // the program calls airlock's budgeted helpers
	idents     []string // input variables the program reads
}

func (t *Tier) compile(code string) (p *program, cached bool, err error) {
	// The program last used is checked first, without a lock or a hash:
	// an agent tends to evaluate one expression over many inputs.
	if p := t.last.Load(); p != nil && p.code == code {
		return p, true, nil
	}
	if p, ok := t.cache.Get(code); ok {
		t.last.Store(p)
		return p, true, nil
	}
	if p, err = t.compileUncached(code); err != nil {
		return nil, false, err
	}
	t.cache.Put(code, p)
	t.last.Store(p)
	return p, false, nil
}

func (t *Tier) compileUncached(code string) (*program, error) {
	if len(code) > t.cfg.maxCode {
		return nil, jobs.Invalid("code", "expression is %d bytes, the limit is %d", len(code), t.cfg.maxCode)
	}
	if err := checkNesting(code, t.cfg.maxDepth); err != nil {
		return nil, err
	}
	w := &walker{maxDepth: t.cfg.maxDepth}
	prog, err := compileWith(code, w)
	if err != nil {
		return nil, err
	}
	return &program{code: code, prog: prog, needsState: w.needsState, idents: w.inputs()}, nil
}

// checkNesting refuses sources whose brackets nest deeper than max, before
// the recursive-descent parser sees them. String literals are skipped.
func checkNesting(code string, max int) error {
	depth := 0
	var quote byte
	for i := 0; i < len(code); i++ {
		c := code[i]
		if quote != 0 {
			switch {
			case c == '\\' && quote != '`':
				i++
			case c == quote:
				quote = 0
			}
			continue
		}
		switch c {
		case '"', '\'', '`':
			quote = c
		case '(', '[', '{':
			depth++
			if depth > max {
				return &airlock.ErrorInfo{Kind: airlock.ErrCompile, Message: fmt.Sprintf("brackets nested more than %d deep (at byte %d)", max, i)}
			}
		case ')', ']', '}':
			depth--
		}
	}
	return nil
}
