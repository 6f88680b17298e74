package setup

import (
	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/interp/starlark"
)

func init() {
	Register(Factory{Name: starlark.Name, Level: airlock.LevelInterpreter, Order: 20, New: func(o Options) (airlock.Tier, error) {
		// Net-granted runs get an egress gateway of their own (decisions
		// in the result) behind the `http` module.
		return starlark.New(starlark.NewConfig().WithLimits(o.limits()).WithEgress(egress.Config{}))
	}})
}
