// Package tiertest is the conformance suite every airlock tier runs.
//
// A tier's test supplies a [Suite]: the tier and a few jobs of its own kind
// (one that succeeds, one that spins forever, one that floods its output,
// one that looks for a planted environment variable). Run then checks what
// every tier must guarantee: typed errors for invalid jobs, the wall clock
// enforced, output capped, cancellation honoured, nothing inherited from the
// host environment, clock and seed recorded, safe concurrent use, and no
// goroutines left behind.
package tiertest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
)

// CanaryEnv is the variable the suite plants in the test process; no job
// may see its value.
const CanaryEnv = "AIRLOCK_CANARY"

// Suite describes a tier under test. Jobs left nil are skipped with a
// reason (an expression has no output stream to flood, say).
type Suite struct {
	Tier airlock.Tier

	// OK succeeds; Check (if set) inspects its result.
	OK    airlock.Job
	Check func(t testing.TB, res airlock.Result)

	// Spin never finishes on its own.
	Spin *airlock.Job
	// Flood writes (or returns) far more than a few KiB of output.
	Flood *airlock.Job
	// Env tries to read the variable named CanaryEnv and report its value in
	// its output or value.
	Env *airlock.Job
	// Broken fails with the code's own error: it does not compile, or
	// raises one while running.
	Broken *airlock.Job
	// Bulk writes exactly BulkBytes bytes to stdout and exits at once.
	Bulk      *airlock.Job
	BulkBytes int

	// Concurrency is how many runs of OK the suite starts at once (default 8).
	Concurrency int
	// Slow tiers (seconds per start) set a longer wall for OK runs.
	OKWall time.Duration
}

// Run runs the conformance suite.
func (s Suite) Run(t *testing.T) {
	t.Helper()
	if p, ok := s.Tier.(airlock.Prober); ok {
		if err := p.Available(); err != nil {
			Unavailable(t, s.Tier.Name(), err)
		}
	}
	t.Run("Identity", s.identity)
	t.Run("Invalid", s.invalid)
	t.Run("OK", s.ok)
	// Count goroutines once the tier has run a job and its pool (if it
	// keeps one) is full: what a tier starts on first use and keeps is not
	// a leak. The check runs here, in the caller's goroutine, after the
	// pool has refilled; none of the subtests' goroutines is counted.
	s.waitWarm(t)
	before := runtime.NumGoroutine()
	t.Run("ClockAndSeed", s.clockAndSeed)
	t.Run("WallClock", s.wallClock)
	t.Run("Cancel", s.cancel)
	t.Run("OutputCap", s.outputCap)
	t.Run("EmptyEnvironment", s.emptyEnv)
	if s.Broken != nil {
		t.Run("CodeError", s.codeError)
	}
	if s.Bulk != nil {
		t.Run("SlowSink", s.slowSink)
	}
	t.Run("Concurrent", s.concurrent)
	if _, ok := s.Tier.(interface{ AdmitsInRun() }); ok {
		t.Run("AdmitsInRun", s.admitsInRun)
	}
	if st, ok := s.Tier.(airlock.SessionTier); ok {
		t.Run("SessionOptions", func(t *testing.T) { sessionOptions(t, st) })
	}
	s.waitWarm(t)
	NoGoroutineLeak(t, before)
}

// waitWarm waits until a pooled tier's pool is full again.
func (s Suite) waitWarm(t *testing.T) {
	t.Helper()
	if p, ok := s.Tier.(airlock.Pooler); ok {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if err := p.WaitWarm(ctx); err != nil {
			t.Fatalf("waiting for the pool to fill: %v", err)
		}
	}
}

// Unavailable skips a test whose tier backend is missing, saying why,
// except under CI (CI=true), where every tier is mandatory and a missing
// backend fails the test.
func Unavailable(t testing.TB, tier string, why error) {
	t.Helper()
	testenv.Skipf(t, "tier %s unavailable: %v", tier, why)
}

func (s Suite) okJob() airlock.Job {
	j := s.OK
	if s.OKWall > 0 {
		j.Limits.WallMS = s.OKWall.Milliseconds()
	}
	return j
}

func (s Suite) identity(t *testing.T) {
	if s.Tier.Name() == "" {
		t.Fatal("tier has an empty name")
	}
	if l := s.Tier.Level(); l < airlock.LevelInterpreter || l > airlock.LevelAccount {
		t.Fatalf("tier level %d out of range", l)
	}
	job := s.okJob()
	if err := s.Tier.Admit(job); err != nil {
		t.Fatalf("tier does not admit its own OK job: %v", err)
	}
	// The router calls Admit for every tier it considers, per job.
	if n := testing.AllocsPerRun(100, func() { _ = s.Tier.Admit(job) }); n != 0 {
		t.Errorf("Admit of an admitted job allocates %v times; it must not allocate", n)
	}
}

// admitsInRun holds a self-admitting tier (AdmitsInRun, see airlock.Tier) to its
// promise, on which the router relies when it runs the tier without
// calling Admit: every job Admit refuses, Run refuses with a bare
// *NotAdmitted (the router checks the type, not a wrapped chain) and
// runs nothing of it.
func (s Suite) admitsInRun(t *testing.T) {
	kinds := []airlock.Kind{airlock.KindExpr, airlock.KindStarlark, airlock.KindWasm, airlock.KindCommand}
	cases := map[string]func(j *airlock.Job){
		"spawn":   func(j *airlock.Job) { j.Grants.Spawn = true },
		"network": func(j *airlock.Job) { j.Grants.Net = []airlock.NetRule{{Host: "example.com"}} },
		"files":   func(j *airlock.Job) { j.Files = map[string]string{"a.txt": "x"} },
	}
	for _, k := range kinds {
		cases["kind "+string(k)] = func(j *airlock.Job) {
			j.Kind, j.Code, j.Argv = k, "1", nil
			if k == airlock.KindCommand {
				j.Code, j.Argv = "", []string{"true"}
			}
		}
	}
	refused := 0
	for name, mutate := range cases {
		job := s.okJob()
		mutate(&job)
		if s.Tier.Admit(job) == nil {
			continue // admitted: nothing to hold Run to
		}
		refused++
		res, err := s.Tier.Run(context.Background(), job)
		if _, ok := err.(*airlock.NotAdmitted); !ok {
			t.Errorf("%s: Admit refuses the job, but Run returned %T: %v", name, err, err)
			continue
		}
		if res.Value != nil || res.Stdout != "" || res.Timings.RunUS != 0 || res.Usage != (airlock.Usage{}) {
			t.Errorf("%s: Run refused the job but reports running it: %+v", name, res)
		}
	}
	if refused == 0 {
		t.Fatal("no case was refused by Admit: the check proved nothing")
	}
}

// sessionOptions: a session tier refuses options it cannot honour (a
// negative TTL) as invalid input, before it starts anything.
func sessionOptions(t *testing.T, st airlock.SessionTier) {
	sess, err := st.OpenSession(context.Background(), airlock.SessionOptions{TTL: -time.Second})
	var inv *airlock.InvalidJob
	if !errors.As(err, &inv) || inv.Field != "ttl" {
		if sess != nil {
			_ = sess.Close()
		}
		t.Fatalf("negative TTL: want *airlock.InvalidJob naming ttl, got %T: %v", err, err)
	}
}

func (s Suite) invalid(t *testing.T) {
	cases := map[string]func(j *airlock.Job){
		"unknown kind":   func(j *airlock.Job) { j.Kind = "bogus" },
		"negative wall":  func(j *airlock.Job) { j.Limits.WallMS = -1 },
		"escaping file":  func(j *airlock.Job) { j.Files = map[string]string{"../x": "y"} },
		"huge memory":    func(j *airlock.Job) { j.Limits.MemoryMB = 1 << 40 },
		"bad situation":  func(j *airlock.Job) { j.Situation = "whatever" },
		"bad secret env": func(j *airlock.Job) { j.Grants.Secrets = map[string]string{"A=B": "x"} },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			job := s.okJob()
			mutate(&job)
			res, err := s.Tier.Run(context.Background(), job)
			var inv *airlock.InvalidJob
			var na *airlock.NotAdmitted
			if !errors.As(err, &inv) && !errors.As(err, &na) {
				t.Fatalf("want *airlock.InvalidJob (or *NotAdmitted), got %T: %v", err, err)
			}
			if res.Error == nil && res.Stopped == nil {
				t.Fatalf("result does not record the error: %+v", res)
			}
		})
	}
}

// codeError: the code's own error is a compile or runtime error whose
// words say its kind once, the same in the error returned and in the
// Result (a tier that passes a result on, as the guarded tiers' workers
// do, must not say it twice).
func (s Suite) codeError(t *testing.T) {
	res, err := s.Tier.Run(context.Background(), *s.Broken)
	kind := airlock.KindOf(err)
	if err == nil || (kind != airlock.ErrCompile && kind != airlock.ErrRuntime) {
		t.Fatalf("want a compile or runtime error, got %v", err)
	}
	words := string(kind) + " error: "
	if !strings.HasPrefix(err.Error(), words) || strings.Count(err.Error(), words) != 1 {
		t.Errorf("error %q does not say %q once, first", err, words)
	}
	if res.Error == nil || res.Error.Kind != kind || res.Error.Message != err.Error() {
		t.Errorf("result's error %+v, want kind %s and message %q", res.Error, kind, err)
	}
}

func (s Suite) ok(t *testing.T) {
	res, err := s.Tier.Run(context.Background(), s.okJob())
	if err != nil {
		t.Fatalf("OK job failed: %v\nresult: %+v", err, res)
	}
	if res.Tier != s.Tier.Name() || res.Level != s.Tier.Level() {
		t.Fatalf("result names tier %q level %d, want %q level %d", res.Tier, res.Level, s.Tier.Name(), s.Tier.Level())
	}
	if res.Stopped != nil || res.Error != nil {
		t.Fatalf("successful result records a stop or error: %+v", res)
	}
	if res.Timings.TotalUS <= 0 || res.Timings.TotalUS < res.Timings.RunUS {
		t.Fatalf("implausible timings %+v", res.Timings)
	}
	if s.Check != nil {
		s.Check(t, res)
	}
}

func (s Suite) clockAndSeed(t *testing.T) {
	job := s.okJob()
	res, err := s.Tier.Run(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	if res.Clock.IsZero() || res.Seed == 0 {
		t.Fatalf("unpinned job's result does not record the clock and seed chosen: clock %v seed %d", res.Clock, res.Seed)
	}
	job.Clock = time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	job.Seed = 424242
	res, err = s.Tier.Run(context.Background(), job)
	var na *airlock.NotAdmitted
	if errors.As(err, &na) {
		// A tier whose programs cannot see a pinned clock refuses it
		// rather than record a time they never saw, and says so in
		// Admit too; the seed alone is still recorded.
		if s.Tier.Admit(job) == nil {
			t.Fatalf("Run refused a pinned clock that Admit admits: %v", err)
		}
		job.Clock = time.Time{}
		if res, err = s.Tier.Run(context.Background(), job); err != nil || res.Seed != job.Seed {
			t.Fatalf("pinned seed not recorded: %v %d", err, res.Seed)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if !res.Clock.Equal(job.Clock) || res.Seed != job.Seed {
		t.Fatalf("pinned clock/seed not recorded: got %v/%d, want %v/%d", res.Clock, res.Seed, job.Clock, job.Seed)
	}
}

// guard fails the test if fn has not returned well after the job's limit.
func guard(t *testing.T, limit time.Duration, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	select {
	case <-done:
	case <-time.After(limit + 60*time.Second):
		t.Fatalf("run did not return within a minute after its %v limit", limit)
	}
}

func (s Suite) wallClock(t *testing.T) {
	if s.Spin == nil {
		missingJob(t, "Spin")
	}
	job := *s.Spin
	job.Limits.WallMS = 300
	job.Limits.CPUMS = 0
	job.Limits.Steps = 0
	guard(t, 300*time.Millisecond, func() {
		res, err := s.Tier.Run(context.Background(), job)
		wantStop(t, res, err, airlock.StopTimeout)
		// The same words on every tier: the wall clock given, ran out (or,
		// on a tier that counts its start, ran out while starting).
		if st, ok := airlock.AsStop(err); ok && !strings.HasPrefix(st.Detail, "wall clock of 300ms ran out") && !strings.HasPrefix(st.Detail, "wall clock ran out while starting") {
			t.Errorf("stop detail %q, want \"wall clock of 300ms ran out\"", st.Detail)
		}
	})
}

func (s Suite) cancel(t *testing.T) {
	if s.Spin == nil {
		missingJob(t, "Spin")
	}
	job := *s.Spin
	job.Limits.WallMS = 60_000
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	guard(t, 300*time.Millisecond, func() {
		res, err := s.Tier.Run(ctx, job)
		wantStop(t, res, err, airlock.StopKilled, airlock.StopTimeout)
	})
}

func (s Suite) outputCap(t *testing.T) {
	if s.Flood == nil {
		missingJob(t, "Flood")
	}
	job := *s.Flood
	job.Limits.OutputBytes = 4096
	// Streamed too: the chunks are what the result keeps, within the cap.
	var rec Recorder
	res, err := s.Tier.Run(rec.Context(context.Background()), job)
	wantStop(t, res, err, airlock.StopOutput)
	if n := len(res.Stdout) + len(res.Stderr); n > 4096 {
		t.Fatalf("output cap 4096 but result carries %d bytes", n)
	}
	rec.Check(t, res)
}

// slowSink: a job whose output sink is slow (as a slow client's stream
// is) keeps all of its output. The program writes less than a pipe holds
// and exits at once, while the sink holds the first chunk for longer than
// a tier might wait for a program's output after its end.
func (s Suite) slowSink(t *testing.T) {
	first := true
	slow := airlock.WithOutput(context.Background(), func(airlock.Stream, []byte) {
		if first {
			first = false
			time.Sleep(6 * time.Second)
		}
	})
	job := *s.Bulk
	job.Limits.OutputBytes = 1 << 20
	res, err := s.Tier.Run(slow, job)
	if err != nil || len(res.Stdout) != s.BulkBytes {
		t.Errorf("%v, %d bytes of stdout, want %d", err, len(res.Stdout), s.BulkBytes)
	}
}

func (s Suite) emptyEnv(t *testing.T) {
	if s.Env == nil {
		missingJob(t, "Env")
	}
	canary := fmt.Sprintf("canary-%d", time.Now().UnixNano())
	t.Setenv(CanaryEnv, canary)
	res, err := s.Tier.Run(context.Background(), *s.Env)
	// The job must have run: a refusal proves nothing about the
	// environment. Its code may fail (an interpreter has no name for the
	// variable); the tier may not refuse it.
	if _, stopped := airlock.AsStop(err); err != nil && !stopped {
		if k := airlock.KindOf(err); k != airlock.ErrCompile && k != airlock.ErrRuntime {
			t.Fatalf("the Env job did not run: %v", err)
		}
	}
	if strings.Contains(fmt.Sprint(res.Value)+res.Stdout+res.Stderr, canary) {
		t.Fatalf("job read the host's %s: %+v", CanaryEnv, res)
	}
}

// missingJob skips a case whose job the suite was not given, saying so,
// except under CI, where every tier must give every job.
func missingJob(t *testing.T, name string) {
	t.Helper()
	testenv.Skipf(t, "no %s job for tier", name)
}

func (s Suite) concurrent(t *testing.T) {
	n := s.Concurrency
	if n == 0 {
		n = 8
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := s.Tier.Run(context.Background(), s.okJob())
			if err != nil {
				errs <- fmt.Errorf("%v (result %+v)", err, res)
				return
			}
			if s.Check != nil {
				s.Check(t, res)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// NoGoroutineLeak waits up to 30 seconds (a used sandbox or VM is
// destroyed in the background) for the goroutine count to fall back to
// before, and fails with a dump if it does not.
func NoGoroutineLeak(t testing.TB, before int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		now := runtime.NumGoroutine()
		if now <= before {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("%d goroutines before, %d after:\n%s", before, now, buf)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func wantStop(t *testing.T, res airlock.Result, err error, reasons ...airlock.StopReason) {
	t.Helper()
	var st *airlock.Stop
	if !errors.As(err, &st) {
		t.Fatalf("want *airlock.Stop %v, got %T: %v (result %+v)", reasons, err, err, res)
	}
	for _, r := range reasons {
		if st.Reason == r {
			if res.Stopped == nil || res.Stopped.Reason != r {
				t.Fatalf("error says %v but result records %+v", r, res.Stopped)
			}
			return
		}
	}
	t.Fatalf("stopped for %q, want one of %v", st.Reason, reasons)
}
