package setup

import (
	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/interp/starlark"
)

func init() {
	Register(Factory{Name: starlark.Name, Order: 20, New: func(o Options) (airlock.Tier, error) {
		return starlark.New(starlark.NewConfig().WithLimits(o.limits()))
	}})
}
