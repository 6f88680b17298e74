// Package setup assembles the tiers this build of airlock knows about, for
// the CLI and the server. Each tier registers itself from its own file here,
// so adding a tier touches no shared code.
package setup

import (
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
// is still built: it reports itself unavailable through airlock.Prober.
func Build(o Options) ([]airlock.Tier, error) {
	var out []airlock.Tier
	for _, f := range Factories() {
		t, err := f.New(o)
		if err != nil {
			return nil, fmt.Errorf("building tier %s: %w", f.Name, err)
		}
		out = append(out, t)
	}
	return out, nil
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
