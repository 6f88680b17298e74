package setup

import (
	"fmt"
	"os"
	"strconv"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/tiers/process"
)

// The process tiers: "seccomp" (level 2) and "process" (level 3).
// AIRLOCK_PROCESS_POOL sets the container tier's warm pool (default 0:
// every job starts cold, which suits one-shot CLI use).
func init() {
	Register(Factory{Name: process.NameFilter, Level: airlock.LevelSyscallFilter, Order: 40, New: func(o Options) (airlock.Tier, error) {
		return process.NewFilter(process.NewConfig().WithLimits(o.limits()))
	}})
	Register(Factory{Name: process.NameContainer, Level: airlock.LevelContainer, Order: 50, New: func(o Options) (airlock.Tier, error) {
		cfg := process.NewConfig().WithLimits(o.limits())
		if v := os.Getenv("AIRLOCK_PROCESS_POOL"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n > 64 {
				return nil, fmt.Errorf("AIRLOCK_PROCESS_POOL=%q: want a pool size from 0 to 64", v)
			}
			cfg = cfg.WithPool(n)
		}
		return process.New(cfg)
	}})
}
