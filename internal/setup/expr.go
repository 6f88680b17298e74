package setup

import (
	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/interp/expr"
)

func init() {
	Register(Factory{Name: expr.Name, Level: airlock.LevelInterpreter, Order: 10, New: func(o Options) (airlock.Tier, error) {
		return expr.NewWithConfig(expr.NewConfig().WithLimits(o.limits())), nil
	}})
}
