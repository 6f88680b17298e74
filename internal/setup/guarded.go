package setup

import (
	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/interp/expr"
	"github.com/airlock-sandbox/airlock/interp/starlark"
	"github.com/airlock-sandbox/airlock/tiers/process"
	"github.com/airlock-sandbox/airlock/tiers/process/worker/exprworker"
	"github.com/airlock-sandbox/airlock/tiers/process/worker/starlarkworker"
)

// Guarded workers: the language tiers re-executed inside the process
// sandbox (level 3), for language jobs whose situation asks for more than
// an interpreter. The registrations run in the worker too (same binary),
// which is how it finds the tier to run.
func init() {
	// The entry packages' own init runs a worker process's job before
	// the rest of the binary initialises; registering them here names the
	// workers for NewGuarded.
	process.RegisterWorker(expr.Name, exprworker.New)
	process.RegisterWorker(starlark.Name, starlarkworker.New)
	for i, name := range []string{expr.Name, starlark.Name} {
		Register(Factory{Name: "guarded-" + name, Level: airlock.LevelContainer, Order: 45 + i, New: func(o Options) (airlock.Tier, error) {
			return process.NewGuarded(name, process.NewConfig().WithLimits(o.limits()))
		}})
	}
}
