package setup

import (
	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/tiers/process"
)

func init() {
	Register(Factory{Name: process.NameFilter, Order: 40, New: func(o Options) (airlock.Tier, error) {
		return process.NewFilter(process.NewConfig().WithLimits(o.limits()))
	}})
	Register(Factory{Name: process.NameContainer, Order: 50, New: func(o Options) (airlock.Tier, error) {
		return process.New(process.NewConfig().WithLimits(o.limits()))
	}})
}
