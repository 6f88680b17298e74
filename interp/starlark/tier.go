// Package starlark is airlock's Starlark tier (level 1, interpreter): it
// runs Starlark scripts in process on go.starlark.net, with every built-in
// that can allocate or loop inside a single interpreter step replaced by a
// bounded one, an allocation budget, cancellation at the deadline, pinned
// time and seeded random modules, and no access to the host.
//
// A script reports its value by setting the global `result`, or the job
// names an `entry` function that is called with the job's input as keyword
// arguments. See docs/starlark.md for what is withheld and how it is tested.
package starlark

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	sl "go.starlark.net/starlark"
	"go.starlark.net/syntax"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/internal/egresswire"
	"github.com/airlock-sandbox/airlock/internal/jobs"
	"github.com/airlock-sandbox/airlock/internal/monotime"
	"github.com/airlock-sandbox/airlock/internal/value"
)

// Name is the tier's name.
const Name = "starlark"

// Config configures a [Tier]. Start from [NewConfig]; the With methods
// return modified copies.
type Config struct {
	limits    airlock.LimitPolicy
	cacheSize int
	maxCode   int
	egress    *egress.Config
}

// NewConfig returns the default configuration: airlock's default limit
// policy, a cache of 256 compiled programs, and scripts up to 1 MiB.
func NewConfig() Config {
	return Config{limits: airlock.DefaultLimitPolicy(), cacheSize: 256, maxCode: 1 << 20}
}

// WithLimits returns a copy with the operator's limit policy.
func (c Config) WithLimits(p airlock.LimitPolicy) Config { c.limits = p; return c }

// WithCacheSize returns a copy that caches up to n compiled programs
// (0 disables the cache).
func (c Config) WithCacheSize(n int) Config { c.cacheSize = n; return c }

// WithMaxCodeBytes returns a copy that refuses scripts (and loaded modules)
// longer than n bytes.
func (c Config) WithMaxCodeBytes(n int) Config { c.maxCode = n; return c }

// WithEgress returns a copy that admits jobs with grants.net: each such
// run gets an in-process egress gateway of its own, built from cfg with
// the job's rules, behind an `http` module that only those runs see.
// cfg's listeners are ignored.
func (c Config) WithEgress(cfg egress.Config) Config { c.egress = egresswire.Template(cfg); return c }

// Tier runs Starlark jobs. It is safe for concurrent use.
type Tier struct {
	cfg   Config
	cache *programCache
	// base is what every script sees predeclared: the bounded built-ins,
	// the modules, the hidden operator built-ins and an empty input.
	base sl.StringDict
	// harness is set only by this package's tests, to run upstream's test
	// data with upstream's assert module.
	harness *harness
}

// harness gives tests modules that load() resolves before the job's files
// and a hook that sees each run's thread.
type harness struct {
	modules map[string]sl.StringDict
	thread  func(*sl.Thread)
}

// New builds a tier.
func New(cfg Config) (*Tier, error) {
	if cfg.cacheSize < 0 {
		return nil, fmt.Errorf("starlark tier: cache size %d is negative", cfg.cacheSize)
	}
	if cfg.maxCode <= 0 {
		return nil, fmt.Errorf("starlark tier: maximum code size %d must be positive", cfg.maxCode)
	}
	if cfg.limits == (airlock.LimitPolicy{}) {
		cfg.limits = airlock.DefaultLimitPolicy()
	}
	base := universe()
	maps.Copy(base, modules())
	maps.Copy(base, hiddenBuiltins())
	empty := new(sl.Dict)
	empty.Freeze()
	base["input"] = empty
	base.Freeze()
	return &Tier{cfg: cfg, cache: newProgramCache(cfg.cacheSize), base: base}, nil
}

// Name returns "starlark".
func (t *Tier) Name() string { return Name }

// Level returns the interpreter level.
func (t *Tier) Level() airlock.Level { return airlock.LevelInterpreter }

// Admit refuses what the tier cannot enforce: other kinds, and every grant
// (the tier has no filesystem, no processes, no credentials store, and
// network egress is not wired in yet).
func (t *Tier) Admit(job airlock.Job) error {
	g := &job.Grants
	switch {
	case job.Kind != airlock.KindStarlark:
		return &airlock.NotAdmitted{Tier: Name, Reason: "runs only starlark jobs, not " + string(job.Kind)}
	case len(g.FS.Read) > 0 || g.FS.ScratchMB > 0:
		return &airlock.NotAdmitted{Tier: Name, Reason: "filesystem grants cannot be honoured: scripts see no filesystem (load reads only the job's files)"}
	case len(g.Net) > 0 && t.cfg.egress == nil:
		return &airlock.NotAdmitted{Tier: Name, Reason: "network grants need an egress gateway, which this tier was not configured with (Config.WithEgress)"}
	case g.Spawn:
		return &airlock.NotAdmitted{Tier: Name, Reason: "process spawn cannot be granted: an interpreter has no processes"}
	case len(g.Secrets) > 0:
		return &airlock.NotAdmitted{Tier: Name, Reason: "secrets cannot be granted: the starlark tier has no environment to place them in"}
	case job.Lifecycle == airlock.LifecyclePersistent:
		return &airlock.NotAdmitted{Tier: Name, Reason: "persistent workspaces need a filesystem; use a session for state across runs"}
	}
	return nil
}

// Run runs one job on a fresh thread with fresh globals.
func (t *Tier) Run(ctx context.Context, job airlock.Job) (airlock.Result, error) {
	return t.run(ctx, job, nil)
}

func (t *Tier) run(ctx context.Context, job airlock.Job, sess *session) (res airlock.Result, err error) {
	// One clock read here and one at the end: a cached program's start
	// (sub-microsecond) is not measured separately and counts as 0.
	start := monotime.Now()
	res.Tier, res.Level = Name, airlock.LevelInterpreter
	var st *runState
	var runStart time.Time
	defer func() {
		end := monotime.Since(start)
		if !runStart.IsZero() {
			res.Timings.RunUS = (end - runStart.Sub(start)).Microseconds()
		}
		if p := recover(); p != nil {
			err = fmt.Errorf("starlark tier: internal error: %v", p)
		}
		if st != nil {
			res.Stdout = st.out.String()
			res.Usage = airlock.Usage{MemoryBytes: st.used, OutputBytes: int64(st.out.Len())}
			res.Usage.Steps = int64(st.th.Steps)
		}
		res.Timings.TotalUS = max(end.Microseconds(), 1)
		res.SetError(err)
	}()
	if err = t.cfg.limits.PrepareInPlace(&job, start); err != nil {
		return res, err
	}
	res.Clock, res.Seed = job.Clock, job.Seed
	if err = t.Admit(job); err != nil {
		return res, err
	}
	if err := ctx.Err(); err != nil {
		return res, &airlock.Stop{Reason: airlock.StopKilled, Detail: "cancelled before the run started"}
	}

	st = newState()
	st.ctx = ctx
	st.deadline, st.wall = start.Add(job.Limits.Wall()), job.Limits.Wall()
	st.maxSteps = uint64(job.Limits.Steps)
	st.budget = job.Limits.MemoryMB << 20
	st.outCap = job.Limits.OutputBytes
	st.sink = airlock.OutputSink(ctx)
	st.clock, st.seed = job.Clock, job.Seed
	st.files = job.Files
	st.tier = t
	if t.harness != nil && t.harness.thread != nil {
		t.harness.thread(st.thread)
	}
	if d, ok := ctx.Deadline(); ok && d.Before(st.deadline) {
		st.deadline = d
	}
	predeclared, input, err := t.predeclared(job.Input)
	if err != nil {
		return res, err
	}
	client, closeEgress, err := t.startEgress(ctx, &job)
	if err != nil {
		return res, err
	}
	defer func() { res.Decision = append(res.Decision, closeEgress()...) }()
	if client != nil {
		predeclared = maps.Clone(predeclared)
		predeclared["http"] = httpModule(client)
	}

	var prog *sl.Program
	var chunk *syntax.File
	cached := false
	name := scriptName(&job)
	if name != defaultScriptName {
		st.loading = append(st.loading, name) // loading itself is a cycle
	}
	if sess == nil {
		prog, cached, err = t.compile(job.Code, name, predeclared, len(job.Input) > 0 || client != nil)
	} else {
		chunk, err = t.parse(job.Code, name, false, sess.globals.Has)
	}
	if err != nil {
		return res, err
	}
	runStart = start
	if !cached {
		runStart = monotime.Now()
		res.Timings.StartUS = runStart.Sub(start).Microseconds()
	}

	thread := st.thread
	st.grant(pollSteps)

	var globals sl.StringDict
	if sess == nil {
		globals, err = prog.Init(thread, predeclared)
	} else {
		globals = sess.globals
		maps.Copy(globals, predeclared) // this run's input (and builtins, if a previous run rebound them)
		delete(globals, "result")
		err = sl.ExecREPLChunk(chunk, thread, globals)
	}
	var value sl.Value
	if err == nil {
		value, err = callEntry(thread, globals, job.Entry, input)
	}
	if err != nil {
		return res, st.classify(err)
	}
	if value != nil && st.outCap > 0 {
		// The value is output too, as an expression's is: bounded by
		// limits.output_bytes, not by memory alone.
		if n, err := measure(value, st.outCap); errors.Is(err, errTooLarge) || (err == nil && n > st.outCap) {
			return res, st.stop(airlock.StopOutput, "value larger than %d bytes", st.outCap)
		}
	}
	if value != nil {
		e := exporter{st: st}
		if res.Value, err = e.export(value, 0); err != nil {
			if s := st.stopped(); s != nil {
				return res, s
			}
			return res, &airlock.ErrorInfo{Kind: airlock.ErrRuntime, Message: "result value: " + err.Error()}
		}
	}
	return res, st.stopped()
}

// defaultScriptName is what errors call a script the job's files do not
// name.
const defaultScriptName = "job.star"

// scriptName is what errors and tracebacks call the job's script: the
// name under which the job's files hold the same text, if one ending in
// .star does (the first in order), or job.star.
func scriptName(job *airlock.Job) string {
	name := ""
	for n, src := range job.Files {
		if len(src) == len(job.Code) && strings.HasSuffix(n, ".star") && src == job.Code && (name == "" || n < name) {
			name = n
		}
	}
	if name == "" {
		return defaultScriptName
	}
	return name
}

// callEntry returns the script's value: the result of calling the entry
// function with the input as keyword arguments, or the global `result`.
func callEntry(th *sl.Thread, globals sl.StringDict, entry string, input *sl.Dict) (sl.Value, error) {
	if entry == "" {
		return globals["result"], nil
	}
	fn, ok := globals[entry]
	if !ok {
		return nil, &airlock.ErrorInfo{Kind: airlock.ErrRuntime, Message: fmt.Sprintf("entry function %q is not defined by the script", entry)}
	}
	if _, ok := fn.(sl.Callable); !ok {
		return nil, &airlock.ErrorInfo{Kind: airlock.ErrRuntime, Message: fmt.Sprintf("entry %q is a %s, not a function", entry, fn.Type())}
	}
	var kwargs []sl.Tuple
	if input != nil {
		kwargs = input.Items()
	}
	return sl.Call(th, fn, nil, kwargs)
}

// predeclared returns what the script sees: the base dictionary, plus the
// input as the dict `input` and each input key that is an identifier (and
// not a built-in's name) as a global of its own.
func (t *Tier) predeclared(in map[string]any) (sl.StringDict, *sl.Dict, error) {
	if len(in) == 0 {
		return t.base, nil, nil
	}
	v, err := toStarlark(in)
	if err != nil {
		return nil, nil, jobs.Invalid("input", "%s", err.Error())
	}
	d := v.(*sl.Dict)
	pre := maps.Clone(t.base)
	pre["input"] = d
	for _, kv := range d.Items() {
		name := string(kv[0].(sl.String))
		if _, builtin := t.base[name]; !builtin && isIdent(name) {
			pre[name] = kv[1]
		}
	}
	return pre, d, nil
}

func isIdent(s string) bool {
	for i, c := range s {
		switch {
		case c == '_', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return s != ""
}

// fileOptions are the dialect: while loops, sets, top-level control flow
// and global reassignment are allowed; recursion is not.
var fileOptions = &syntax.FileOptions{Set: true, While: true, TopLevelControl: true, GlobalReassign: true}

// parse checks the size, parses and rewrites a script.
func (t *Tier) parse(code, filename string, infer bool, predeclared func(string) bool) (*syntax.File, error) {
	if len(code) > t.cfg.maxCode {
		return nil, jobs.Invalid("code", "%s is %d bytes; the starlark tier accepts at most %d", filename, len(code), t.cfg.maxCode)
	}
	f, err := fileOptions.Parse(filename, code, 0)
	if err != nil {
		return nil, &airlock.ErrorInfo{Kind: airlock.ErrCompile, Message: err.Error()}
	}
	if err := rewriteFile(f, infer, func(name string) bool { return predeclared(name) || sl.Universe.Has(name) }); err != nil {
		return nil, &airlock.ErrorInfo{Kind: airlock.ErrCompile, Message: err.Error()}
	}
	return f, nil
}

// compile returns the cached program for code and the predeclared names,
// compiling it on a miss.
func (t *Tier) compile(code, filename string, predeclared sl.StringDict, extraNames bool) (prog *sl.Program, cached bool, err error) {
	key := code
	if extraNames || filename != defaultScriptName {
		var b strings.Builder
		b.WriteString(filename)
		for _, name := range value.SortedKeys(predeclared) {
			if _, base := t.base[name]; !base {
				b.WriteString("\x00" + name)
			}
		}
		b.WriteString("\x01" + code)
		key = b.String()
	}
	if prog := t.cache.get(key); prog != nil {
		return prog, true, nil
	}
	f, err := t.parse(code, filename, true, predeclared.Has)
	if err != nil {
		return nil, false, err
	}
	prog, err = sl.FileProgram(f, predeclared.Has)
	if err != nil {
		return nil, false, &airlock.ErrorInfo{Kind: airlock.ErrCompile, Message: err.Error()}
	}
	t.cache.put(key, prog)
	return prog, false, nil
}

// classify turns an evaluation error into airlock's typed errors: a stop
// recorded by a limit wins, then a denied capability, then the code's own
// error with its backtrace.
func (s *runState) classify(err error) error {
	if st := s.stopped(); st != nil {
		return st
	}
	if s.denied != nil {
		return s.denied
	}
	var ce *airlock.ErrorInfo
	if errors.As(err, &ce) {
		return ce
	}
	var ee *sl.EvalError
	if errors.As(err, &ee) {
		var inner *airlock.ErrorInfo
		if errors.As(ee.Unwrap(), &inner) && inner.Kind == airlock.ErrCompile {
			return &airlock.ErrorInfo{Kind: airlock.ErrCompile, Message: ee.Msg}
		}
		return &airlock.ErrorInfo{Kind: airlock.ErrRuntime, Message: ee.Backtrace()}
	}
	return &airlock.ErrorInfo{Kind: airlock.ErrCompile, Message: err.Error()}
}

// load resolves load() statements against the job's in-memory files only.
func (s *runState) load(th *sl.Thread, module string) (sl.StringDict, error) {
	if h := s.tier.harness; h != nil {
		if m, ok := h.modules[module]; ok {
			return m, nil
		}
	}
	if strings.HasPrefix(module, "/") || strings.HasPrefix(module, "~") || strings.Contains(module, "..") || strings.Contains(module, "\\") {
		s.denied = &airlock.Denied{Capability: "fs", Detail: fmt.Sprintf("load(%q): host paths are never read; load takes only the job's own .star files", module)}
		return nil, s.denied
	}
	if e, ok := s.loaded[module]; ok {
		return e.globals, e.err
	}
	src, ok := s.files[module]
	if !ok || !strings.HasSuffix(module, ".star") {
		return nil, fmt.Errorf("no module %q among the job's files (load takes only job files ending in .star)", module)
	}
	for i, name := range s.loading {
		if name == module {
			return nil, fmt.Errorf("load cycle: %s -> %s", strings.Join(s.loading[i:], " -> "), module)
		}
	}
	s.loading = append(s.loading, module)
	defer func() { s.loading = s.loading[:len(s.loading)-1] }()
	if s.loaded == nil {
		s.loaded = map[string]*loadEntry{}
	}
	e := &loadEntry{}
	prog, _, err := s.tier.compile(src, module, s.tier.base, false)
	if err != nil {
		e.err = err
	} else {
		e.globals, e.err = prog.Init(th, s.tier.base)
		// Frozen as upstream's ExecFile leaves a module: what load()
		// hands out is immutable.
		if e.err == nil {
			if err := s.freezeModule(module, e.globals); err != nil {
				e.globals, e.err = nil, err
			}
		}
	}
	s.loaded[module] = e
	return e.globals, e.err
}

// programCache is a bounded LRU of compiled programs keyed by source and
// predeclared names.
type programCache struct {
	mu    sync.Mutex
	max   int
	bytes int // source bytes held, bounded by maxCacheBytes
	order *list.List
	items map[string]*list.Element
}

// maxCacheBytes bounds the source text the cache keeps (programs are a
// small multiple of it), whatever the entry count.
const maxCacheBytes = 64 << 20

type cacheEntry struct {
	key  string
	prog *sl.Program
}

func newProgramCache(n int) *programCache {
	return &programCache{max: n, order: list.New(), items: map[string]*list.Element{}}
}

func (c *programCache) get(key string) *sl.Program {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		c.order.MoveToFront(el)
		return el.Value.(*cacheEntry).prog
	}
	return nil
}

func (c *programCache) put(key string, prog *sl.Program) {
	if c.max == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		c.order.MoveToFront(el)
		return
	}
	c.items[key] = c.order.PushFront(&cacheEntry{key: key, prog: prog})
	c.bytes += len(key)
	for c.order.Len() > c.max || (c.bytes > maxCacheBytes && c.order.Len() > 1) {
		el := c.order.Back()
		c.order.Remove(el)
		k := el.Value.(*cacheEntry).key
		c.bytes -= len(k)
		delete(c.items, k)
	}
}

// CachedPrograms reports how many compiled programs the tier holds.
func (t *Tier) CachedPrograms() int {
	t.cache.mu.Lock()
	defer t.cache.mu.Unlock()
	return t.cache.order.Len()
}
