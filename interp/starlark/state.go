package starlark

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"
	"unsafe"

	sl "go.starlark.net/starlark"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/monotime"
	"github.com/airlock-sandbox/airlock/internal/runstop"
)

// pollSteps is how many interpreter steps run between two looks at the wall
// clock and the caller's context. The interpreter calls OnMaxSteps when a
// chunk is used up, so cancellation needs no timer and no goroutine.
const pollSteps = 1 << 13

// pollIters is how many iterations a bounded builtin runs between two polls.
const pollIters = 1 << 10

// runState is everything one run (or one run of a session) owns: its
// budgets, its captured output, its pinned clock and seed, and the reason it
// was stopped, if it was.
//
// The thread is the first field, so a builtin finds the state from the
// thread it is called on without a thread-local map (see stateOf).
type runState struct {
	th       sl.Thread
	thread   *sl.Thread // &th
	ctx      context.Context
	deadline time.Time
	wall     time.Duration // limits.wall_ms, for the stop's words
	maxSteps uint64
	nextPoll uint64 // the step count at which the current chunk ends

	budget int64 // allocation budget in bytes (limits.memory_mb)
	used   int64 // bytes charged so far

	outCap int64
	out    strings.Builder
	sink   func(airlock.Stream, []byte) // airlock.OutputSink, or nil

	reason atomic.Pointer[airlock.Stop]
	denied *airlock.Denied

	clock time.Time
	seed  uint64
	rng   *rand.Rand

	files   map[string]string
	loaded  map[string]*loadEntry
	loading []string
	tier    *Tier
}

type loadEntry struct {
	globals sl.StringDict
	err     error
}

// threadName marks the threads this tier starts.
const threadName = "airlock"

// stateOf returns the run state of a thread started by this tier. The
// tier's builtins are reachable only from scripts it runs, on threads it
// made; the name check guards against anything else.
func stateOf(th *sl.Thread) *runState {
	if th.Name != threadName {
		panic("airlock starlark builtin called on a foreign thread")
	}
	return (*runState)(unsafe.Pointer(th))
}

// newState returns a run state with its thread set up: the load hook, the
// step hook and the first polling chunk.
func newState() *runState {
	st := &runState{}
	st.thread = &st.th
	st.th.Name = threadName
	st.th.Load = loadHook
	st.th.OnMaxSteps = stepHook
	return st
}

func loadHook(th *sl.Thread, module string) (sl.StringDict, error) {
	return stateOf(th).load(th, module)
}

func stepHook(th *sl.Thread) { stateOf(th).onSteps(th) }

// stop records the first reason the run was stopped and cancels the thread.
// It returns the recorded stop as an error.
func (s *runState) stop(reason airlock.StopReason, format string, args ...any) error {
	st := &airlock.Stop{Reason: reason, Detail: fmt.Sprintf(format, args...)}
	if s.reason.CompareAndSwap(nil, st) {
		s.thread.Cancel(string(reason) + ": " + st.Detail)
	}
	return s.reason.Load()
}

// stopped returns the recorded stop, if any.
func (s *runState) stopped() error {
	if st := s.reason.Load(); st != nil {
		return st
	}
	return nil
}

// poll checks the wall clock and the caller's context; builtins that loop
// call it every pollIters iterations.
func (s *runState) poll() error {
	if err := s.stopped(); err != nil {
		return err
	}
	if err := s.ctx.Err(); err != nil {
		if err == context.DeadlineExceeded {
			return s.stop(airlock.StopTimeout, "the caller's deadline passed")
		}
		if errors.Is(context.Cause(s.ctx), runstop.ErrClosed) {
			return s.stop(airlock.StopKilled, "cancelled: %v", runstop.ErrClosed)
		}
		return s.stop(airlock.StopKilled, "cancelled by the caller")
	}
	if !monotime.Now().Before(s.deadline) {
		return s.stop(airlock.StopTimeout, "wall clock of %v ran out", s.wall)
	}
	return nil
}

// onSteps is the thread's OnMaxSteps hook: it enforces the step limit and
// polls for cancellation every pollSteps steps.
func (s *runState) onSteps(th *sl.Thread) {
	if th.Steps >= s.maxSteps {
		s.stop(airlock.StopSteps, "step limit of %d reached (limits.steps)", s.maxSteps)
		return
	}
	if s.poll() != nil {
		return
	}
	s.grant(th.Steps + pollSteps)
}

// grant lets the thread run up to the given step count (at most the step
// limit) before the next poll.
func (s *runState) grant(steps uint64) {
	s.nextPoll = min(steps, s.maxSteps)
	s.th.SetMaxExecutionSteps(s.nextPoll)
}

// workUnit is how many bytes of linear work (scanning, hashing, comparing
// or moving memory) count as one interpreter step.
const workUnit = 256

// work counts n bytes of linear work done inside one step as steps, before
// it is done: a search through a string of hundreds of megabytes is one
// instruction, and thousands of them would otherwise run between two polls
// of the wall clock. When the count reaches the end of the current chunk,
// the step limit, the wall clock and the context are checked at once.
func (s *runState) work(n int64) error {
	if n < workUnit {
		return nil
	}
	s.th.Steps += uint64(n / workUnit)
	if s.th.Steps >= s.nextPoll {
		s.onSteps(&s.th)
	}
	return s.stopped()
}

// charge counts n bytes against the allocation budget before they are
// allocated; what names the operation for the error.
func (s *runState) charge(n int64, what string) error {
	if n < 0 || n > s.budget-s.used {
		return s.stop(airlock.StopMemory, "%s would exceed the allocation budget of %d bytes (limits.memory_mb; %d charged so far)", what, s.budget, s.used)
	}
	s.used += n
	return nil
}

// chargeMul charges count*unit bytes, refusing products that overflow.
func (s *runState) chargeMul(count, unit int64, what string) error {
	if count < 0 || unit < 0 || (unit != 0 && count > (s.budget-s.used)/unit+1) {
		return s.charge(-1, what)
	}
	return s.charge(count*unit, what)
}

// random returns the run's generator, seeded from the job's seed on first use.
func (s *runState) random() *rand.Rand {
	if s.rng == nil {
		s.rng = rand.New(rand.NewPCG(s.seed, s.seed^0x9e3779b97f4a7c15))
	}
	return s.rng
}

// write appends printed text to stdout under the output cap.
func (s *runState) write(text string) error {
	room := s.outCap - int64(s.out.Len())
	if int64(len(text)) > room {
		cut := int(max(room, 0))
		for cut > 0 && !utf8.RuneStart(text[cut]) {
			cut-- // keep stdout valid UTF-8
		}
		s.out.WriteString(text[:cut])
		s.emit(text[:cut])
		return s.stop(airlock.StopOutput, "output exceeded %d bytes (limits.output_bytes)", s.outCap)
	}
	s.out.WriteString(text)
	s.emit(text)
	return nil
}

// emit passes printed text to the output sink, if the run has one.
func (s *runState) emit(text string) {
	if s.sink != nil && text != "" {
		s.sink(airlock.Stdout, []byte(text))
	}
}
