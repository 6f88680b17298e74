// Package setup assembles the tiers this build of airlock knows about, for
// the CLI and the server. Each tier registers itself from its own file here,
// so adding a tier touches no shared code.
package setup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"

	"github.com/airlock-sandbox/airlock"
)

// Options configure the tiers the registry builds.
type Options struct {
	// Limits is the operator's limit policy (zero: airlock.DefaultLimitPolicy).
	Limits airlock.LimitPolicy
}

// Factory builds one tier.
type Factory struct {
	Name string
	// Level is the tier's isolation level, reported even when the tier
	// cannot be built here.
	Level airlock.Level
	// Order sorts tiers by expected start-up cost, cheapest first.
	Order int
	New   func(Options) (airlock.Tier, error)
}

var (
	mu        sync.Mutex
	factories []Factory
)

// Register adds a tier factory; it is called from init functions.
func Register(f Factory) {
	mu.Lock()
	defer mu.Unlock()
	factories = append(factories, f)
	sort.SliceStable(factories, func(i, j int) bool { return factories[i].Order < factories[j].Order })
}

// Factories returns the registered factories, cheapest first.
func Factories() []Factory {
	mu.Lock()
	defer mu.Unlock()
	return append([]Factory(nil), factories...)
}

func (o Options) limits() airlock.LimitPolicy {
	if o.Limits == (airlock.LimitPolicy{}) {
		return airlock.DefaultLimitPolicy
	}
	return o.Limits
}

// Build constructs every registered tier. A tier whose backend is missing
// reports itself unavailable through airlock.Prober; a tier that cannot
// even be built here (no permission for its state directory, say) is
// replaced by a stand-in that says why, so one broken tier never stops the
// others — an expression still evaluates without root.
func Build(o Options) ([]airlock.Tier, error) {
	var out []airlock.Tier
	for _, f := range Factories() {
		t, err := f.New(o)
		if err != nil {
			t = &broken{name: f.Name, level: f.Level, err: fmt.Errorf("building tier %s: %w", f.Name, err)}
		}
		out = append(out, t)
	}
	return out, nil
}

// broken stands for a tier that could not be built: it admits nothing and
// reports why it is unavailable.
type broken struct {
	name  string
	level airlock.Level
	err   error
}

func (b *broken) Name() string         { return b.name }
func (b *broken) Level() airlock.Level { return b.level }
func (b *broken) Available() error     { return b.err }
func (b *broken) Admit(airlock.Job) error {
	return &airlock.NotAdmitted{Tier: b.name, Reason: "unavailable: " + b.err.Error()}
}
func (b *broken) Run(context.Context, airlock.Job) (airlock.Result, error) {
	err := b.Admit(airlock.Job{})
	res := airlock.Result{Tier: b.name, Level: b.level}
	res.SetError(err)
	return res, err
}

// Close releases tiers that hold resources (pools, sandboxes).
func Close(tiers []airlock.Tier) error {
	var errs []error
	for _, t := range tiers {
		if c, ok := t.(io.Closer); ok {
			errs = append(errs, c.Close())
		}
	}
	return errors.Join(errs...)
}
