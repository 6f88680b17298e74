package process

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/jobs"
	"github.com/airlock-sandbox/airlock/internal/monotime"
	"github.com/airlock-sandbox/airlock/internal/value"
	"github.com/airlock-sandbox/airlock/tiers/internal/warmpool"
	"github.com/airlock-sandbox/airlock/tiers/process/internal/stage"
	"github.com/airlock-sandbox/airlock/tiers/process/internal/workerwire"
	wk "github.com/airlock-sandbox/airlock/tiers/process/worker"
)

// Guarded workers run a language tier (expr, Starlark, WASM) one job per
// process: this binary re-executed into user, PID, mount, network, IPC and
// UTS namespaces, pivoted into an empty read-only root, under the seccomp
// filter (on every thread) and address-space and CPU rlimits. The Job goes
// in on stdin and the Result comes back on stdout, in the worker package's
// binary frames, and the worker is discarded. A fatal error or a runaway
// in the interpreter kills only the worker.

var (
	workersMu sync.Mutex
	workers   = map[string]wk.Entry{}
)

// RegisterWorker makes a language tier available as a guarded worker under
// name. The worker process is this same binary re-executed, which finds
// the constructor through the same registration: register from an init
// function or at the start of main, before role.Run(process.Roles()).
func RegisterWorker(name string, newTier func() airlock.Tier) {
	RegisterWorkerEntry(name, wk.Entry{New: newTier})
}

// RegisterWorkerEntry is RegisterWorker with a warm-up job, as the entry
// packages (worker/exprworker, worker/starlarkworker) provide: a worker
// runs it before it reports ready.
func RegisterWorkerEntry(name string, e wk.Entry) {
	if name == "" || e.New == nil {
		panic("process.RegisterWorker: empty name or nil constructor")
	}
	workersMu.Lock()
	workers[name] = e
	workersMu.Unlock()
}

func registeredWorker(name string) (wk.Entry, bool) {
	workersMu.Lock()
	defer workersMu.Unlock()
	e, ok := workers[name]
	return e, ok
}

// workerRuntimeMB is the worker's own memory (Go runtime, interpreter)
// on top of the job's limit in its cgroup.
const workerRuntimeMB = 48

// Guarded is a language tier run in guarded workers, at level 3.
type Guarded struct {
	name  string
	inner airlock.Tier // for Admit; jobs run in workers
	cfg   Config
	size  int

	mu     sync.Mutex
	pool   *warmpool.Pool[poolKey, *worker] // started on first use: building the tier costs nothing
	closed bool
	// spawn starts the workers (see spawner), so that a refill does not
	// fork this process.
	spawn spawners
}

// NewGuarded returns the tier "guarded-<name>" for a worker registered
// with RegisterWorker or RegisterWorkerEntry. cfg's pool size is how many workers are kept
// started (0 means 2).
func NewGuarded(name string, cfg Config) (*Guarded, error) { return newGuardedWith(name, cfg) }

// newGuardedWith is NewGuarded with options (withDirectStarts applies).
func newGuardedWith(name string, cfg Config, opts ...option) (*Guarded, error) {
	e, ok := registeredWorker(name)
	if !ok {
		return nil, fmt.Errorf("guarded tier: no worker registered as %q", name)
	}
	g := &Guarded{name: name, inner: e.New(), cfg: cfg}
	g.spawn.off = buildOptions(opts).directStarts
	size := cfg.poolSize
	if size == 0 {
		size = 2
	}
	g.size = size
	return g, nil
}

// Name returns "guarded-<worker name>".
func (g *Guarded) Name() string { return "guarded-" + g.name }

// Level returns LevelContainer.
func (g *Guarded) Level() airlock.Level { return airlock.LevelContainer }

// Available reports whether workers can be started here.
func (g *Guarded) Available() error { return probe() }

// Admit admits what the language tier admits.
func (g *Guarded) Admit(job airlock.Job) error {
	err := g.inner.Admit(job)
	if err == nil {
		return nil // before errors.As, whose target escapes: no allocation
	}
	var na *airlock.NotAdmitted
	if errors.As(err, &na) {
		return &airlock.NotAdmitted{Tier: g.Name(), Reason: na.Reason}
	}
	return err
}

// Close stops the worker pool.
func (g *Guarded) Close() error {
	g.mu.Lock()
	p := g.pool
	g.pool, g.closed = nil, true
	g.mu.Unlock()
	if p != nil {
		p.Close()
	}
	g.spawn.close()
	return nil
}

// WaitWarm starts the worker pool if it has not started yet and blocks
// until it is full and no used worker is still being destroyed
// (airlock.Pooler).
func (g *Guarded) WaitWarm(ctx context.Context) error {
	workers := g.workers()
	if workers == nil {
		if err := probe(); err != nil {
			return fmt.Errorf("warming workers: tier unavailable: %w", err)
		}
		return errors.New("warming workers: tier closed")
	}
	return waitPool(ctx, workers, poolKey{})
}

var _ airlock.Pooler = (*Guarded)(nil)

// PoolStats returns the worker pool's counters (airlock.Pooler); zero
// before the pool has started.
func (g *Guarded) PoolStats() airlock.PoolStats {
	g.mu.Lock()
	p := g.pool
	g.mu.Unlock()
	if p == nil {
		return airlock.PoolStats{Size: g.size}
	}
	return p.Stats(poolKey{}).PoolStats()
}

// workers returns the worker pool, starting it on first use; nil when the
// tier is unavailable or closed.
func (g *Guarded) workers() *warmpool.Pool[poolKey, *worker] {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.pool == nil && !g.closed && probe() == nil {
		// A used worker exits after writing its result, and the goroutine
		// that learns of that then destroys it (one that would not is
		// killed by its guard's last tick, or in Run before there is one).
		g.pool = newPool(poolKey{}, g.size, func(ctx context.Context, _ poolKey) (*worker, error) { return g.startWorker(ctx) }, func(w *worker) bool { return !exitedCh(w.waitCh) }, (*worker).destroy,
			func(w *worker, f func()) { w.whenExited(f) })
	}
	return g.pool
}

// worker is one started worker process.
type worker struct {
	proc // the worker process

	cg     jobCgroup
	memMB  int64 // the cgroup's current memory limit
	uid    uint32
	stdin  *os.File
	stdout *os.File
	out    *bufio.Reader // stdout, after the ready frame
	stderr *capture
	errWG  sync.WaitGroup
}

func (g *Guarded) startWorker(ctx context.Context) (_ *worker, err error) {
	exe, err := selfExe()
	if err != nil {
		return nil, err
	}
	w := &worker{proc: newProc(), stderr: &capture{limit: 4096, over: make(chan struct{})}}
	if w.uid, err = sharedUIDs(g.cfg.uidBase, g.cfg.uidCount).get(); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			w.destroy()
		}
	}()
	p, err := pipes(3)
	if err != nil {
		return nil, err
	}
	stdinR, stdinW, stdoutR, stdoutW, stderrR, stderrW := p[0][0], p[0][1], p[1][0], p[1][1], p[2][0], p[2][1]
	w.stdin, w.stdout = stdinW, stdoutR
	fds := newFdTable(stage.FdExe + 1)
	fds.set(stage.FdExe, exe)
	w.cmd = &exec.Cmd{
		Path: stage.FdPath(stage.FdExe), Args: []string{"airlock-worker"}, Dir: "/",
		Env:        []string{stage.Env + "=" + stage.Worker, wk.Env + "=" + g.name, "GOMAXPROCS=1"},
		Stdin:      stdinR,
		Stdout:     stdoutW,
		Stderr:     stderrW,
		ExtraFiles: fds.files,
		SysProcAttr: &syscall.SysProcAttr{
			Pdeathsig: syscall.SIGKILL,
			Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID | syscall.CLONE_NEWNS |
				syscall.CLONE_NEWNET | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(w.uid), Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(w.uid), Size: 1}},
			Credential:  &syscall.Credential{Uid: 0, Gid: 0, NoSetGroups: true},
		},
	}
	w.memMB = poolLimits.MemoryMB + workerRuntimeMB
	l := poolLimits
	l.MemoryMB = w.memMB
	if w.cg, err = newJobCgroup(newName(g.cfg.baseDir), cgLimitsFor(l), false); err != nil {
		return nil, fmt.Errorf("starting worker: %w", err)
	}
	if err := w.cg.holdMemoryLimit(); err != nil {
		return nil, fmt.Errorf("starting worker: %w", err)
	}
	// Through the spawner where there is one (the worker is still this
	// binary, passed as a descriptor: the spawner only forks), else from
	// here. On cgroup v2 it is born in its group.
	cgDir := cloneInto(w.cmd, w.cg)
	if bin, berr := discoverStage(); berr == nil {
		err = w.startProc(&g.spawn, bin, w.cmd, w.uid, true, cgDir) // a worker has no network at all
	} else {
		err = w.startHere(w.cmd)
	}
	stdinR.Close()
	stdoutW.Close()
	stderrW.Close()
	if err != nil {
		stderrR.Close()
		return nil, fmt.Errorf("starting worker: %w", err)
	}
	if cgDir == nil {
		if err := w.cg.add(w.pid); err != nil {
			return nil, fmt.Errorf("starting worker: joining cgroup: %w", err)
		}
	}
	w.errWG.Add(1)
	go w.stderr.read(stderrR, airlock.Stderr, &w.stderr.err, &w.errWG)
	ready := make(chan error, 1)
	w.errWG.Add(1)
	go func() {
		defer w.errWG.Done()
		out := bufio.NewReader(w.stdout)
		if err := workerwire.ReadReady(out); err != nil {
			ready <- fmt.Errorf("starting worker: not ready (%v)", err)
			return
		}
		w.out = out // published by the channel send
		ready <- nil
	}()
	select {
	case err := <-ready:
		if err != nil {
			w.errWG.Wait()
			return nil, fmt.Errorf("%w: %s", err, bytes.TrimSpace(w.stderr.err))
		}
		return w, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (w *worker) destroy() {
	if w.pid != 0 {
		w.signalKill()
		<-w.waitCh
		w.release()
	}
	if w.cg != nil {
		_ = w.cg.destroy()
	}
	for _, f := range []*os.File{w.stdin, w.stdout} {
		if f != nil {
			f.Close()
		}
	}
	w.errWG.Wait()
	if w.uid != 0 {
		sharedUIDsPut(w.uid)
	}
}

// Run runs one job in a fresh worker.
func (g *Guarded) Run(ctx context.Context, job airlock.Job) (airlock.Result, error) {
	begin := time.Now()
	res := airlock.Result{Tier: g.Name(), Level: g.Level()}
	finish := func(err error) (airlock.Result, error) {
		res.Tier, res.Level = g.Name(), g.Level()
		res.Timings.TotalUS = max(monotime.Micros(begin), 1)
		res.Stopped, res.Error = nil, nil
		res.SetError(err)
		return res, err
	}
	prepared, err := g.cfg.policy.Prepare(job)
	res.Clock, res.Seed = prepared.Clock, prepared.Seed
	if err != nil {
		return finish(err)
	}
	if err := g.Admit(prepared); err != nil {
		return finish(err)
	}
	workers := g.workers()
	if workers == nil {
		return finish(noWorkers())
	}
	// The language tier resolves its own limits; the clock and seed are
	// pinned here so the result records what ran.
	job.Clock, job.Seed = prepared.Clock, prepared.Seed
	wall := prepared.Limits.Wall()
	deadline := begin.Add(wall + 250*time.Millisecond)
	w, ok := workers.Claim(poolKey{}, nil) // a miss asks the pool for more
	if !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadlineCause(ctx, deadline, errWall)
		defer cancel()
		if w, err = g.startWorker(ctx); err != nil {
			return finish(startStopped(ctx, err))
		}
	}
	// The used worker is discarded after the result is returned: removing
	// its cgroup and starting a replacement are not on the caller's path.
	// Once the guard is armed, a worker that outlives its job is killed by
	// the guard; before that, here.
	guarded := false
	defer func() {
		if !guarded {
			w.signalKill()
		}
		workers.Release(poolKey{}, w)
		if ok {
			workers.Done(poolKey{})
		}
	}()
	req, err := w.request(&prepared, &job)
	if err != nil {
		return finish(err)
	}
	res.Timings.StartUS = monotime.Micros(begin)

	// From here the worker is killed, with the reason recorded first, when
	// the caller's context ends, the wall clock runs out, or a cgroup
	// limit is crossed (one timer checks both of the latter). This
	// goroutine reads the result itself: a hand-off from another goroutine
	// costs a scheduler wake-up on the claim's path.
	//
	// A request of at most one page goes out first: the pipe is fresh and
	// empty, so the write cannot block, and the guard below is armed while
	// the worker wakes up rather than before (arming its timer wakes
	// another of this process's threads, ≈ 4 µs off a warm claim's median
	// in alternated runs). Nothing the job does can outrun the guard: the
	// deadline is fixed above, a context already done kills at once, and
	// the result is read only once the guard is armed. A larger request is
	// written after, as its write waits for the worker, and a kill ends
	// that wait.
	early := len(req) <= 4096
	var werr error
	if early {
		_, werr = w.stdin.Write(req)
	}
	gd := &guard{w: w}
	defer gd.end() // before the release: nothing touches the worker after
	defer context.AfterFunc(ctx, func() {
		gd.check(func() *airlock.Stop {
			if context.Cause(ctx) == errWall { // the deadline of a start after a miss
				return stopWall(wall)
			}
			return &airlock.Stop{Reason: airlock.StopKilled, Detail: "cancelled: " + context.Cause(ctx).Error()}
		})
	})()
	gd.watch(deadline, func() *airlock.Stop { return stopWall(wall) },
		func() *airlock.Stop { return (&sandbox{cg: w.cg}).watch(&prepared) })
	guarded = true

	// Stdin stays open until the worker is destroyed: the worker reads
	// one frame, and closing costs the claim's path.
	if early {
		err = werr
	} else {
		_, err = w.stdin.Write(req)
	}
	var inner airlock.Result
	if err == nil {
		inner, err = workerwire.ReadResult(w.out, workerwire.ResultLimit(prepared.Limits.OutputBytes))
	}
	if stop := gd.stopped(); stop != nil {
		w.signalKill()
		<-w.waitCh
		return finish(stop)
	}
	if err != nil {
		w.signalKill()
		return finish(g.crashed(w, &prepared))
	}
	return finish(takeResult(ctx, &res, inner, &prepared))
}

// noWorkers says why a tier has no workers: it cannot run here, or it
// was closed.
func noWorkers() error {
	if err := probe(); err != nil {
		return fmt.Errorf("starting worker: tier unavailable: %w", err)
	}
	return errors.New("starting worker: tier closed")
}

// startStopped is the error of a worker start that failed: a stop when
// the wall clock ran out or the caller cancelled meanwhile, else err.
func startStopped(ctx context.Context, err error) error {
	switch {
	case context.Cause(ctx) == errWall:
		return &airlock.Stop{Reason: airlock.StopTimeout, Detail: "wall clock ran out while starting a worker"}
	case ctx.Err() != nil:
		return &airlock.Stop{Reason: airlock.StopKilled, Detail: "cancelled while starting a worker: " + ctx.Err().Error()}
	}
	return err
}

// request binds the claiming job's limits to the worker and encodes the
// job (with its pinned clock and seed) for it.
func (w *worker) request(prepared, job *airlock.Job) ([]byte, error) {
	limits := prepared.Limits
	limits.MemoryMB += workerRuntimeMB
	if limits.MemoryMB != w.memMB {
		if err := w.cg.setMemory(limits.MemoryMB << 20); err != nil {
			return nil, fmt.Errorf("claiming worker: %w", err)
		}
	}
	req, err := workerwire.AppendRequest(nil, limits.MemoryMB, uint64((prepared.Limits.CPUMS+999)/1000), job)
	if err != nil {
		return nil, jobs.Invalid("", "encoding job: %s", err.Error())
	}
	return req, nil
}

// takeResult makes the worker's result, inner, the job's (res keeps its
// start time, to which the worker's is added).
func takeResult(ctx context.Context, res *airlock.Result, inner airlock.Result, prepared *airlock.Job) error {
	var err error
	if inner.Value, err = value.Normalize(inner.Value); err != nil {
		return fmt.Errorf("reading worker result: %w", err)
	}
	start := res.Timings.StartUS
	*res = inner
	res.Timings.StartUS += start
	// The worker's protocol returns output only with the result: a sink
	// gets it then, whole, so what it was given still equals the Result.
	if sink := airlock.OutputSink(ctx); sink != nil {
		if res.Stdout != "" {
			sink(airlock.Stdout, []byte(res.Stdout))
		}
		if res.Stderr != "" {
			sink(airlock.Stderr, []byte(res.Stderr))
		}
	}
	res.Clock, res.Seed = prepared.Clock, prepared.Seed
	return inner.Err()
}

// watchEvery is how often a worker's cgroup is checked during its job.
const watchEvery = 20 * time.Millisecond

// guard kills a claimed worker, recording why first, until its job has
// ended.
type guard struct {
	mu    sync.Mutex
	ended bool
	w     *worker
	timer *time.Timer   // the watch's
	stop  *airlock.Stop // why the worker was killed, the first reason
}

// watch checks until the job ends, every watchEvery and at the deadline,
// that the deadline has not passed (else the stop is late's) and that why
// returns nil. One runtime timer does both: arming one costs the claim's
// path a scheduler wake-up. Its first tick after the job has ended kills
// the worker if it has not exited by itself, which a used worker does at
// once: neither that kill nor stopping the timer is on the caller's path.
func (g *guard) watch(deadline time.Time, late, why func() *airlock.Stop) {
	next := func() time.Duration { return min(watchEvery, time.Until(deadline)) }
	check := func() *airlock.Stop {
		if !time.Now().Before(deadline) {
			return late()
		}
		return why()
	}
	var tick func()
	tick = func() {
		if g.check(check) { // the job has ended, or the worker was killed
			g.w.killIfRunning() // one that outlived its job (after a kill, no-op)
			return
		}
		g.mu.Lock()
		g.timer.Reset(next()) // also when the job has just ended: for the tick above
		g.mu.Unlock()
	}
	g.mu.Lock() // the first tick waits for the timer to be recorded
	g.timer = time.AfterFunc(next(), tick)
	g.mu.Unlock()
}

// stopWall is the stop of a worker killed when the wall clock ran out.
func stopWall(wall time.Duration) *airlock.Stop {
	return &airlock.Stop{Reason: airlock.StopTimeout, Detail: fmt.Sprintf("wall clock of %v ran out (worker killed)", wall)}
}

// check runs why and kills the worker if it returns a stop, unless the
// job has ended; it reports whether the worker was killed or the job had
// ended.
func (g *guard) check(why func() *airlock.Stop) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ended {
		return true
	}
	stop := why()
	if stop == nil {
		return false
	}
	if g.stop == nil {
		g.stop = stop
	}
	g.w.signalKill()
	return true
}

// stopped returns why the worker was killed, or nil.
func (g *guard) stopped() *airlock.Stop {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.stop
}

// end stops every later check (one running finishes first); the watch's
// timer fires once more (see watch).
func (g *guard) end() {
	g.mu.Lock()
	g.ended = true
	g.mu.Unlock()
}

// crashed explains a worker that died without a result.
func (g *Guarded) crashed(w *worker, job *airlock.Job) error {
	<-w.waitCh
	w.errWG.Wait()
	stderr := string(bytes.TrimSpace(w.stderr.err))
	ws := w.ws // zero when the worker's end is not known (its spawner died)
	switch {
	case outOfMemory(stderr):
		return &airlock.Stop{Reason: airlock.StopMemory, Detail: fmt.Sprintf("worker ran out of its address space (%d MiB + runtime)", job.Limits.MemoryMB)}
	case ws.Signaled() && ws.Signal() == syscall.SIGXCPU:
		return stopCPU(job)
	}
	if oom, _ := w.cg.events(); oom > 0 {
		return stopMemory(job)
	}
	if _, cpu := w.cg.usage(); ws.Signaled() && ws.Signal() == syscall.SIGKILL && cpu >= job.Limits.CPUMS*1000 {
		return stopCPU(job)
	}
	if i := strings.LastIndex(stderr, "\n\ngoroutine "); i > 0 {
		stderr = stderr[:i] // the first lines say what happened; the stacks do not help the caller
	}
	how := "its end unknown"
	if w.wsOK {
		how = describeWait(ws)
	}
	return &airlock.ErrorInfo{Kind: airlock.ErrRuntime, Message: fmt.Sprintf("interpreter crashed; only its guarded worker died (%s): %s", how, firstLines(stderr, 3))}
}

// outOfMemory reports whether a worker's last words say it ran out of memory:
// the Go runtime's "out of memory" or an ENOMEM, and, in a race-built worker,
// the race runtime failing to map its shadow memory under the address-space
// limit (it exits with status 66 rather than the runtime's 2).
func outOfMemory(stderr string) bool {
	return strings.Contains(stderr, "out of memory") ||
		strings.Contains(stderr, "cannot allocate memory") ||
		(strings.Contains(stderr, "ThreadSanitizer") && strings.Contains(stderr, "failed to allocate"))
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, " | ")
}
