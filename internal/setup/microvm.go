package setup

import (
	"fmt"
	"os"
	"strconv"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/tiers/microvm"
)

// The microvm tier boots cold by default, which suits one-shot CLI runs.
// Long-lived processes (the server) choose warm starts with
// AIRLOCK_MICROVM_WARM=snapshot and AIRLOCK_MICROVM_POOL=<n>.
func init() {
	Register(Factory{Name: microvm.Name, Level: airlock.LevelVirtualisation, Order: 70, New: func(o Options) (airlock.Tier, error) {
		cfg := microvm.DefaultConfig().WithLimits(o.limits())
		if w := os.Getenv("AIRLOCK_MICROVM_WARM"); w != "" {
			cfg = cfg.WithWarm(microvm.Warm(w))
		}
		if p := os.Getenv("AIRLOCK_MICROVM_POOL"); p != "" {
			n, err := strconv.Atoi(p)
			if err != nil {
				return nil, fmt.Errorf("AIRLOCK_MICROVM_POOL=%q: want a number", p)
			}
			cfg = cfg.WithPool(n)
		}
		return microvm.New(cfg)
	}})
}
