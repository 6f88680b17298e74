package setup

import (
	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/interp/expr"
	"github.com/airlock-sandbox/airlock/interp/starlark"
	"github.com/airlock-sandbox/airlock/tiers/process"
)

// Guarded workers: the language tiers re-executed inside the process
// sandbox (level 3), for language jobs whose situation asks for more than
// an interpreter. The registrations run in the worker too (same binary),
// which is how it finds the tier to run.
func init() {
	process.RegisterWorker(expr.Name, func() airlock.Tier { return expr.New() })
	process.RegisterWorker(starlark.Name, func() airlock.Tier {
		t, err := starlark.New(starlark.NewConfig())
		if err != nil {
			panic("starlark: default config refused: " + err.Error()) // a programming error, caught by the tests
		}
		return t
	})
	for i, name := range []string{expr.Name, starlark.Name} {
		Register(Factory{Name: "guarded-" + name, Level: airlock.LevelContainer, Order: 45 + i, New: func(o Options) (airlock.Tier, error) {
			return process.NewGuarded(name, process.NewConfig().WithLimits(o.limits()))
		}})
	}
}
