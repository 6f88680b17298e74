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
// which is how its role (see Roles) finds the tier to run.
func init() {
	process.RegisterWorkerEntry(expr.Name, exprworker.Entry)
	process.RegisterWorkerEntry(starlark.Name, starlarkworker.Entry)
	for i, name := range []string{expr.Name, starlark.Name} {
		Register(Factory{Name: "guarded-" + name, Level: airlock.LevelContainer, Order: 45 + i, New: func(o Options) (airlock.Tier, error) {
			return process.NewGuarded(name, process.NewConfig().WithLimits(o.limits()))
		}})
	}
}
