package wasm

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/sys"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/jobs"
	"github.com/airlock-sandbox/airlock/internal/value"
)

// spec is everything one run needs, after the job (or the plugin call) has
// been translated: the single place where policy becomes wazero config.
type spec struct {
	args     []string
	env      map[string]string
	stdin    string
	entry    string   // "" runs _start
	params   []uint64 // for entry
	memLimit uint64   // bytes of linear memory
	wall     time.Duration
	clock    time.Time
	seed     uint64
	outCap   int64
	sink     func(airlock.Stream, []byte) // airlock.OutputSink, or nil
	fs       fsSpec
	host     *hostState
}

// outcome is what a run produced, as far as it got.
type outcome struct {
	results  []uint64
	exitCode int
	stdout   string
	stderr   string
	memPeak  uint64
	outBytes int64
	start    time.Duration // instantiation (including the start section)
	run      time.Duration
}

// errOutput is the cause of a run cancelled because its output cap was
// reached.
var errOutput = errors.New("output cap reached")

// run instantiates c afresh under s and calls its entry point. The
// instance is closed before run returns.
func (e *engine) run(ctx context.Context, c *compiled, s *spec) (outcome, error) {
	var out outcome
	if need := uint64(c.info.memMinPages) * pageSize; need > s.memLimit {
		return out, &airlock.Stop{Reason: airlock.StopMemory, Detail: fmt.Sprintf("module declares %d MiB of memory, above the limit of %d MiB", need>>20, s.memLimit>>20)}
	}
	var entryDef api.FunctionDefinition
	if s.entry != "" {
		d, ok := exportedFunc(c.mod, s.entry)
		if !ok {
			return out, jobs.Invalid("entry", "module exports no function %q", s.entry)
		}
		entryDef = d
		if len(s.params) != len(d.ParamTypes()) {
			return out, jobs.Invalid("input", "function %s takes %d arguments, got %d", s.entry, len(d.ParamTypes()), len(s.params))
		}
	} else if _, ok := exportedFunc(c.mod, "_start"); !ok {
		return out, jobs.Invalid("entry", "module exports no _start; name an exported function in entry")
	}

	parent := ctx
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	ctx, cancelWall := context.WithTimeoutCause(ctx, s.wall, &airlock.Stop{Reason: airlock.StopTimeout, Detail: fmt.Sprintf("wall clock of %v ran out", s.wall)})
	defer cancelWall()

	alloc := &memAlloc{limit: s.memLimit}
	ctx = experimental.WithMemoryAllocator(ctx, alloc)
	outs := &outputs{limit: s.outCap, over: func() { cancel(errOutput) }, sink: s.sink}
	if s.host != nil {
		s.host.outs = outs
		ctx = context.WithValue(ctx, stateKey{}, s.host)
	}
	fsc, closeFS, err := s.fs.config()
	if err != nil {
		return out, err
	}
	defer closeFS()

	vc := &vclock{base: s.clock, tick: int64(e.cfg.clockTick)}
	mc := wazero.NewModuleConfig().
		WithName("").
		WithArgs(s.args...).
		WithStdin(strings.NewReader(s.stdin)).
		WithStdout(outs.writer(&outs.stdout)).
		WithStderr(outs.writer(&outs.stderr)).
		WithWalltime(vc.walltime, 1).
		WithNanotime(vc.nanotime, 1).
		WithNanosleep(vc.sleep).
		WithOsyield(func() {}).
		WithRandSource(seededRand(s.seed)).
		WithFSConfig(fsc)
	for _, k := range value.SortedKeys(s.env) {
		mc = mc.WithEnv(k, s.env[k])
	}
	// The start functions run once the call stack's budget is set (as
	// InstantiateModule would run them).
	mc = mc.WithStartFunctions()
	starts := []string{exportStart, "_start"}
	if s.entry != "" {
		starts[1] = "_initialize"
	}

	t0 := time.Now()
	mod, err := e.rt.InstantiateModule(ctx, c.mod, mc)
	if err == nil {
		err = e.start(ctx, mod, c, s.memLimit, starts)
	}
	out.start = time.Since(t0)
	if err == nil && s.entry != "" {
		t1 := time.Now()
		out.results, err = mod.ExportedFunction(s.entry).Call(ctx, s.params...)
		out.run = time.Since(t1)
		_ = entryDef
	} else {
		out.run, out.start = out.start, 0
	}
	stackOver := false
	if mod != nil {
		if g := mod.ExportedGlobal(exportStack); g != nil && err != nil {
			stackOver = int64(g.Get()) < 0
		}
		_ = mod.Close(context.Background())
	}
	out.stdout, out.stderr, out.outBytes = outs.result()
	out.memPeak = alloc.peak
	if stackOver && ctx.Err() == nil && !errors.Is(context.Cause(ctx), errOutput) {
		return out, &airlock.Stop{Reason: airlock.StopMemory, Detail: fmt.Sprintf("call stack limit of %d MiB reached (its frames counted at an upper bound of their size)", s.memLimit>>20)}
	}
	return out, e.classify(err, &out, parent, ctx, alloc, s.host)
}

// start sets the call stack's budget of a guarded module and runs the
// start functions as InstantiateModule would: in order, each if the
// module exports it; proc_exit(0) ends the run without an error.
func (e *engine) start(ctx context.Context, mod api.Module, c *compiled, budget uint64, starts []string) error {
	if c.info.stackGuard {
		g, ok := mod.ExportedGlobal(exportStack).(api.MutableGlobal)
		if !ok {
			return errors.New("the stack guard's global is missing")
		}
		g.Set(min(budget, math.MaxInt64))
	}
	for _, name := range starts {
		fn := mod.ExportedFunction(name)
		if fn == nil {
			continue
		}
		if _, err := fn.Call(ctx); err != nil {
			var exit *sys.ExitError
			if errors.As(err, &exit) {
				if exit.ExitCode() == 0 {
					return nil
				}
				return err
			}
			if name == exportStart {
				name = "start"
			}
			return fmt.Errorf("module[] function[%s] failed: %w", name, err)
		}
	}
	return nil
}

// classify turns what wazero returned into airlock's typed errors.
func (e *engine) classify(err error, out *outcome, parent, ctx context.Context, alloc *memAlloc, host *hostState) error {
	if host != nil && host.err != nil {
		return host.err
	}
	cause := context.Cause(ctx)
	if errors.Is(cause, errOutput) {
		return &airlock.Stop{Reason: airlock.StopOutput, Detail: "output reached its cap"}
	}
	if err == nil {
		return nil
	}
	var exit *sys.ExitError
	if errors.As(err, &exit) {
		// wazero closes a module whose context ended with one of two
		// codes; with the context alive, any code is the guest's own
		// proc_exit (which may pass those same values).
		switch code := exit.ExitCode(); {
		case ctx.Err() != nil && (code == sys.ExitCodeContextCanceled || code == sys.ExitCodeDeadlineExceeded):
		default:
			out.exitCode = int(int32(exit.ExitCode()))
			if alloc.refused && out.exitCode != 0 {
				return &airlock.Stop{Reason: airlock.StopMemory, Detail: fmt.Sprintf("linear memory limit of %d MiB reached", alloc.limit>>20)}
			}
			return nil
		}
	}
	if ctx.Err() != nil {
		if parent.Err() != nil {
			return &airlock.Stop{Reason: airlock.StopKilled, Detail: "cancelled: " + context.Cause(parent).Error()}
		}
		var st *airlock.Stop
		if errors.As(cause, &st) {
			return st
		}
		return &airlock.Stop{Reason: airlock.StopTimeout}
	}
	if alloc.refused {
		return &airlock.Stop{Reason: airlock.StopMemory, Detail: fmt.Sprintf("linear memory limit of %d MiB reached", alloc.limit>>20)}
	}
	var st *airlock.Stop
	if errors.As(err, &st) {
		return st
	}
	var d *airlock.Denied
	if errors.As(err, &d) {
		return d
	}
	msg := err.Error()
	if i := strings.Index(msg, "\nwasm stack trace:"); i >= 0 {
		msg = msg[:i]
	}
	return &airlock.ErrorInfo{Kind: airlock.ErrRuntime, Message: msg}
}

// vclock is the guest's clock: pinned to the job's instant, advancing a
// fixed tick per read and exactly the requested time per sleep, so that a
// run replays byte for byte.
type vclock struct {
	base time.Time
	off  int64 // nanoseconds since base
	tick int64
}

func (v *vclock) walltime() (int64, int32) {
	v.off += v.tick
	t := v.base.Add(time.Duration(v.off))
	return t.Unix(), int32(t.Nanosecond())
}

func (v *vclock) nanotime() int64 {
	v.off += v.tick
	return v.off
}

func (v *vclock) sleep(ns int64) {
	if ns > 0 {
		v.off += ns
	}
}

// seededRand is the guest's random_get: ChaCha8 keyed by the job's seed.
func seededRand(seed uint64) io.Reader {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], seed)
	key := sha256.Sum256(append([]byte("airlock/wasm/random_get/v1\x00"), b[:]...))
	return rand.NewChaCha8(key)
}

// memAlloc backs a run's linear memory and refuses to grow it past limit
// (memory.grow then returns -1 to the guest).
type memAlloc struct {
	limit   uint64
	peak    uint64
	refused bool
}

func (a *memAlloc) Allocate(capHint, _ uint64) experimental.LinearMemory {
	return &linearMemory{a: a, buf: make([]byte, 0, min(capHint, a.limit))}
}

type linearMemory struct {
	a   *memAlloc
	buf []byte
}

func (m *linearMemory) Reallocate(size uint64) []byte {
	if size > m.a.limit {
		m.a.refused = true
		return nil
	}
	if size <= uint64(cap(m.buf)) {
		m.buf = m.buf[:size] // never written: linear memory does not shrink
	} else {
		// Let append pick the growth (as wazero's own memory does); the
		// new bytes, and the spare capacity, are zero.
		m.buf = append(m.buf, make([]byte, size-uint64(len(m.buf)))...)
	}
	m.a.peak = max(m.a.peak, size)
	return m.buf
}

func (m *linearMemory) Free() { m.buf = nil }

// outputs holds a run's stdout and stderr under one shared cap: the first
// bytes are kept, and reaching the cap stops the run.
type outputs struct {
	mu             sync.Mutex
	limit, used    int64
	stdout, stderr bytes.Buffer
	hit            bool
	over           func()
	sink           func(airlock.Stream, []byte)
}

type capWriter struct {
	o   *outputs
	buf *bytes.Buffer
}

func (o *outputs) writer(buf *bytes.Buffer) io.Writer { return capWriter{o, buf} }

func (w capWriter) Write(p []byte) (int, error) { return w.o.write(w.buf, p) }

func (o *outputs) write(buf *bytes.Buffer, p []byte) (int, error) {
	o.mu.Lock()
	room := o.limit - o.used
	if int64(len(p)) <= room {
		buf.Write(p)
		o.used += int64(len(p))
		o.emit(buf, p)
		o.mu.Unlock()
		return len(p), nil
	}
	buf.Write(p[:max(room, 0)])
	o.emit(buf, p[:max(room, 0)])
	o.used = o.limit
	first := !o.hit
	o.hit = true
	o.mu.Unlock()
	if first && o.over != nil {
		o.over()
	}
	return int(max(room, 0)), errOutput
}

// emit passes what was kept to the sink; o.mu is held, so chunks go one
// at a time.
func (o *outputs) emit(buf *bytes.Buffer, p []byte) {
	if o.sink == nil || len(p) == 0 {
		return
	}
	stream := airlock.Stdout
	if buf == &o.stderr {
		stream = airlock.Stderr
	}
	o.sink(stream, p)
}

func (o *outputs) result() (stdout, stderr string, n int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.stdout.String(), o.stderr.String(), o.used
}
