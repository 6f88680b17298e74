package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"

	"github.com/airlock-sandbox/airlock"
)

// The types of target.
const (
	TypeTier = "tier" // an airlock tier
	TypeRaw  = "raw"  // the engine a tier wraps, used bare
	TypePeer = "peer" // another tool doing the same job (cel-go for expressions)
)

// A Trial is one timed run, prepared beforehand (untimed) and cleaned up
// afterwards (untimed).
type Trial func(ctx context.Context) error

// Target is one thing the benchmark measures.
type Target struct {
	Name     string
	Type     string
	Workload airlock.Kind
	Level    airlock.Level // tiers only
	// For names the tiers a raw engine or peer is compared with; empty means
	// every tier running Workload.
	For []string
	// Available reports why the target cannot run here, or nil.
	Available func() error
	// Cold prepares the i-th cold run and returns it with its clean-up.
	Cold func(ctx context.Context, i int) (Trial, func(), error)
	// Warm prepares the warm path once and returns its run, called many
	// times, and its clean-up; nil when the target has no warm path.
	Warm func(ctx context.Context) (Trial, func(), error)
	// Settle, when set, is called untimed before each warm run: a tier with
	// a pool waits there until the pool is full again, so a warm figure is
	// what one claim costs, not how fast the pool refills.
	Settle func(ctx context.Context) error
	// Versus, on a raw engine or peer, names the target its ratio is taken
	// against instead of its workload's raw engine: a whole-process row's
	// paired reference (see WholeProcess).
	Versus string
	// ColdNote and WarmNote say what cold and warm mean for this target.
	ColdNote, WarmNote string
	// Accel, when set, names the hardware acceleration the target's runs
	// use ("kvm" or "tcg"), once Available has returned nil.
	Accel func() string
}

// accelerated is a tier that runs its sandboxes under a hypervisor's
// accelerator, or emulates one (the microVM tier).
type accelerated interface{ Accelerator() string }

var (
	baselineMu sync.Mutex
	baselines  []func() Target
)

// RegisterBaseline adds a raw engine or peer to every benchmark run. It is
// called from init functions, so a tier's package (or this one) can add the
// bare form of its backend without touching shared code.
func RegisterBaseline(newTarget func() Target) {
	baselineMu.Lock()
	defer baselineMu.Unlock()
	baselines = append(baselines, newTarget)
}

// Baselines returns the registered raw engines and peers.
func Baselines() []Target {
	baselineMu.Lock()
	defer baselineMu.Unlock()
	out := make([]Target, 0, len(baselines))
	for _, b := range baselines {
		out = append(out, b())
	}
	return out
}

// tierTarget wraps a tier. The instance built first (and probed) serves
// the warm runs, unless the source builds a warm form of its own, and the
// router; every cold run builds a fresh one, so nothing is cached or
// pooled.
func tierTarget(f TierSource, shared airlock.Tier, kind airlock.Kind) Target {
	job := Job(kind)
	var settle func(context.Context) error // the warm instance's pool, if any
	t := Target{
		Name: f.Name, Type: TypeTier, Workload: kind, Level: shared.Level(),
		Available: func() error {
			if p, ok := shared.(airlock.Prober); ok {
				return p.Available()
			}
			return nil
		},
		ColdNote: "a fresh tier instance per run (built untimed): nothing compiled, cached or pooled",
		WarmNote: "one tier instance, the same job again: its caches (compiled program or module) and pools are warm",
	}
	t.Cold = func(ctx context.Context, i int) (Trial, func(), error) {
		fresh, err := f.New()
		if err != nil {
			return nil, nil, err
		}
		done := func() { closeTier(fresh) }
		return func(ctx context.Context) error {
			res, err := fresh.Run(ctx, job)
			return check(kind, res, err)
		}, done, nil
	}
	t.Warm = func(ctx context.Context) (Trial, func(), error) {
		tier := shared
		done := func() {}
		if f.Warm != nil {
			fresh, err := f.Warm()
			if err != nil {
				return nil, nil, err
			}
			tier, done = fresh, func() { closeTier(fresh) }
		}
		run := func(ctx context.Context) error {
			res, err := tier.Run(ctx, job)
			return check(kind, res, err)
		}
		settle = nil
		if w, ok := tier.(airlock.Pooler); ok {
			settle = w.WaitWarm
		}
		return run, done, nil
	}
	if a, ok := shared.(accelerated); ok {
		t.Accel = a.Accelerator
	}
	if _, ok := shared.(airlock.Pooler); ok {
		t.Settle = func(ctx context.Context) error {
			if settle == nil {
				return nil
			}
			return settle(ctx)
		}
		t.WarmNote = "one tier instance with a full pool (refills untimed between runs): the claim of a started sandbox"
	}
	return t
}

func closeTier(t airlock.Tier) {
	if c, ok := t.(io.Closer); ok {
		_ = c.Close()
	}
}

// kindOf returns the first workload kind the tier admits.
func kindOf(t airlock.Tier) (airlock.Kind, error) {
	var reasons []string // each different refusal once, in the order met
	for _, k := range Kinds {
		job := Job(k)
		err := t.Admit(job)
		if err == nil {
			return k, nil
		}
		if !slices.Contains(reasons, err.Error()) {
			reasons = append(reasons, err.Error())
		}
	}
	return "", fmt.Errorf("admits none of the benchmark's workloads: %s", strings.Join(reasons, "; "))
}
