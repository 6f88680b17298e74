package process

import (
	"context"
	"errors"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/corpus"
	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
	"github.com/airlock-sandbox/airlock/internal/testing/tiertest"
	"github.com/airlock-sandbox/airlock/interp/expr"
	"github.com/airlock-sandbox/airlock/tiers/process/internal/workerwire"
	"github.com/airlock-sandbox/airlock/tiers/process/worker/exprworker"
	"golang.org/x/sys/unix"
)

// Workers for the tests: the real expr tier, and misbehaving tiers that
// stand for an interpreter bug (a fatal runtime error, unbounded
// allocation, a loop that ignores its context).
func init() {
	RegisterWorkerEntry(expr.Name, exprworker.Entry) // with its warm-up job, as the airlock binary registers it
	RegisterWorker("test-fatal", func() airlock.Tier { return misbehaving{"fatal"} })
	RegisterWorker("test-alloc", func() airlock.Tier { return misbehaving{"alloc"} })
	RegisterWorker("test-spin", func() airlock.Tier { return misbehaving{"spin"} })
	RegisterWorker("test-linger", func() airlock.Tier { return misbehaving{"linger"} })
	RegisterWorker("test-threads", func() airlock.Tier { return misbehaving{"threads"} })
}

type misbehaving struct{ how string }

func (m misbehaving) Name() string                { return "test-" + m.how }
func (m misbehaving) Level() airlock.Level        { return airlock.LevelInterpreter }
func (m misbehaving) Admit(job airlock.Job) error { return nil }

var sink [][]byte

func (m misbehaving) Run(ctx context.Context, job airlock.Job) (airlock.Result, error) {
	switch m.how {
	case "fatal":
		go func() { panic("interpreter bug") }() // unrecovered on another goroutine: the process dies
		select {}
	case "alloc":
		for {
			sink = append(sink, make([]byte, 64<<20))
			for i := range sink[len(sink)-1] {
				sink[len(sink)-1][i] = 1
			}
		}
	case "spin":
		for {
			runtime.Gosched()
		}
	case "threads": // an escape tried from threads started after the worker confined itself
		var (
			mu      sync.Mutex
			wg      sync.WaitGroup
			tids    = map[int]bool{}
			escapes []any
		)
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Never unlocked: the thread ends with the goroutine, so
				// the next one runs on a thread made after it.
				runtime.LockOSThread()
				uerr := unix.Unshare(unix.CLONE_NEWUTS)
				_, serr := os.Stat("/usr")
				mu.Lock()
				defer mu.Unlock()
				tids[unix.Gettid()] = true
				if uerr == nil {
					escapes = append(escapes, "unshare allowed")
				}
				if serr == nil {
					escapes = append(escapes, "the host's /usr visible")
				}
			}()
		}
		wg.Wait()
		return airlock.Result{Value: map[string]any{"threads": int64(len(tids)), "escapes": escapes}}, nil
	case "linger": // a result, then no exit
		frame, _ := workerwire.AppendResult(nil, &airlock.Result{Value: int64(7)})
		_, _ = os.Stdout.Write(frame)
		select {}
	}
	return airlock.Result{}, nil
}

func newGuarded(t *testing.T, name string) *Guarded {
	t.Helper()
	return newGuardedFrom(t, name, testConfig(t).WithPool(1))
}

func newGuardedFrom(t *testing.T, name string, cfg Config, opts ...option) *Guarded {
	t.Helper()
	g, err := newGuardedWith(name, cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Available(); err != nil {
		tiertest.Unavailable(t, g.Name(), err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

func exprJob(code string) airlock.Job { return airlock.Job{Kind: airlock.KindExpr, Code: code} }

func TestGuardedConformance(t *testing.T) {
	g := newGuarded(t, "expr")
	before := runtime.NumGoroutine()
	tiertest.Suite{
		Tier: g,
		OK:   exprJob("1 + 2"),
		Check: func(t testing.TB, res airlock.Result) {
			if n, ok := res.Value.(int64); !ok || n != 3 {
				t.Errorf("value %#v, want 3", res.Value)
			}
		},
		Spin:   ptr(exprJob(`let r = 1..100000; count(r, count(r, count(r, # < 0) == 0) < 0)`)),
		Flood:  ptr(exprJob(`map(1..100000, "xxxxxxxxxxxxxxxxxxxx")`)),
		Env:    ptr(exprJob(tiertest.CanaryEnv)), // the canary's name as an identifier must not reach its value
		Broken: ptr(exprJob(`int("x")`)),
	}.Run(t)
	g.Close()
	tiertest.NoGoroutineLeak(t, before)
}

// TestGuardedContainsCrashes shows that an interpreter that dies — a fatal
// runtime error, unbounded allocation, a loop deaf to cancellation, a
// caller that gives up — takes only its worker with it, and the caller
// gets a typed error.
func TestGuardedContainsCrashes(t *testing.T) {
	// Both ways a worker can be started: through the tier's spawner, and
	// from this process (when no spawner can be had).
	for _, direct := range []bool{false, true} {
		t.Run(map[bool]string{false: "spawner", true: "direct"}[direct], func(t *testing.T) {
			guardedCrashes(t, func(t *testing.T, name string) *Guarded {
				return newGuardedFrom(t, name, testConfig(t).WithPool(1), withDirectStarts(direct))
			})
		})
	}
}

func guardedCrashes(t *testing.T, newGuarded func(*testing.T, string) *Guarded) {
	ctx := context.Background()
	job := exprJob("1")
	job.Limits.MemoryMB = 64
	job.Limits.WallMS = 20000
	// CPU up to the wall: a race-built worker in a TCG guest (TestCgroupV2)
	// can spend the default 10 s of CPU before it reaches 64 MB.
	job.Limits.CPUMS = 20000

	t.Run("FatalError", func(t *testing.T) {
		_, err := newGuarded(t, "test-fatal").Run(ctx, job)
		var ce *airlock.ErrorInfo
		if !errors.As(err, &ce) || !strings.Contains(ce.Message, "interpreter bug") {
			t.Fatalf("want a runtime ErrorInfo naming the crash, got %v", err)
		}
	})
	t.Run("UnboundedAllocation", func(t *testing.T) {
		_, err := newGuarded(t, "test-alloc").Run(ctx, job)
		wantStop(t, err, airlock.StopMemory)
	})
	t.Run("LingerAfterResult", func(t *testing.T) {
		// The host has its result and returns; the worker's guard kills it
		// at its next tick, and only then is it destroyed and replaced.
		g := newGuarded(t, "test-linger")
		res, err := g.Run(ctx, job)
		if err != nil || res.Value != int64(7) {
			t.Fatalf("got %v, %v; want the worker's value 7", res.Value, err)
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := g.WaitWarm(wctx); err != nil {
			t.Fatalf("the lingering worker was not killed and replaced: %v", err)
		}
	})
	t.Run("DeafSpin", func(t *testing.T) {
		start := time.Now()
		spin := job
		spin.Limits.WallMS = 1000
		_, err := newGuarded(t, "test-spin").Run(ctx, spin)
		wantStop(t, err, airlock.StopTimeout)
		t.Logf("stopped after %v", time.Since(start))
	})
	t.Run("CallerCancels", func(t *testing.T) {
		// A worker deaf to everything is killed when the caller gives up,
		// before or during its job, and the stop says so.
		g := newGuarded(t, "test-spin")
		done, cancel := context.WithCancel(ctx)
		cancel()
		_, err := g.Run(done, job)
		wantStop(t, err, airlock.StopKilled)
		later, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		_, err = g.Run(later, job)
		wantStop(t, err, airlock.StopKilled)
	})
	t.Run("ExprRunaway", func(t *testing.T) {
		g := newGuarded(t, "expr")
		_, err := g.Run(ctx, exprJob(`repeat("x", 1000000000)`))
		if _, ok := airlock.AsStop(err); !ok {
			t.Fatalf("want a stop, got %v", err)
		}
		res, err := g.Run(ctx, exprJob("2 * 21"))
		if err != nil || res.Value != int64(42) || res.Tier != "guarded-expr" {
			t.Fatalf("the tier does not keep working after a runaway: %v %+v", err, res)
		}
	})
	if os.Getpid() <= 0 {
		t.Fatal("unreachable")
	}
}

// TestGuardedExprCorpus runs the expr corpus in guarded workers.
func TestGuardedExprCorpus(t *testing.T) {
	cases, err := corpus.Load("expr")
	if err != nil {
		t.Fatal(err)
	}
	g := newGuarded(t, "expr")
	for _, c := range cases {
		if !c.Applies("expr") {
			continue
		}
		t.Run(strings.TrimPrefix(c.ID, "expr/"), func(t *testing.T) {
			if why := c.SkipReason(nil); why != "" {
				testenv.Skipf(t, "%s", why)
			}
			if v := c.Run(context.Background(), g, nil); !v.Pass {
				t.Errorf("%s: %s (outcome %s)", c.ID, v.Detail, v.Outcome)
			}
		})
	}
}

// TestGuardedConfinedThreads: a worker's job runs on whichever thread the
// runtime gives it (the worker's goroutine is not locked to one), so
// every thread must be confined. A worker tries, from four threads it
// starts after it confined itself, to unshare a namespace (refused by
// the seccomp filter) and to see the host's /usr (outside its empty
// root).
func TestGuardedConfinedThreads(t *testing.T) {
	res, err := newGuarded(t, "test-threads").Run(context.Background(), exprJob("1"))
	if err != nil {
		t.Fatal(err)
	}
	v, _ := res.Value.(map[string]any)
	if n, _ := v["threads"].(int64); n < 2 {
		t.Fatalf("the job ran on %v threads, want several: %+v", v["threads"], res.Value)
	}
	if e, _ := v["escapes"].([]any); len(e) > 0 {
		t.Fatalf("a thread of the worker was not confined: %v", e)
	}
}

func TestGuardedUnknownWorker(t *testing.T) {
	if _, err := NewGuarded("no-such-worker", NewConfig()); err == nil {
		t.Fatal("NewGuarded accepted an unregistered worker")
	}
}

// TestOutOfMemoryWords: the last words by which a worker that ran out of
// memory is told from one that crashed otherwise, including a race-built
// worker's, whose race runtime exits 66 when it cannot map shadow memory.
func TestOutOfMemoryWords(t *testing.T) {
	for _, c := range []struct {
		stderr string
		want   bool
	}{
		{"fatal error: runtime: out of memory", true},
		{"runtime: mmap: cannot allocate memory", true},
		{"==123==ERROR: ThreadSanitizer failed to allocate 0x4000 (16384) bytes at address 7f0000000000 (errno: 12)", true},
		{"panic: runtime error: index out of range [3] with length 2", false},
		{"fatal error: stack overflow", false},
		{"failed to allocate a ticket", false},
		{"", false},
	} {
		if got := outOfMemory(c.stderr); got != c.want {
			t.Errorf("outOfMemory(%q) = %v, want %v", c.stderr, got, c.want)
		}
	}
}
