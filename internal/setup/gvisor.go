package setup

import (
	"fmt"
	"os"
	"strconv"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/tiers/gvisor"
)

// The gVisor tier. AIRLOCK_GVISOR_POOL sets the warm pool's size (default
// 0: every job starts a sandbox cold, which suits one-shot CLI use); a
// long-lived server sets it to keep sandboxes ready.
func init() {
	Register(Factory{
		Name:  gvisor.Name,
		Level: airlock.LevelVirtualisation,
		Order: 60,
		New: func(o Options) (airlock.Tier, error) {
			cfg := gvisor.NewConfig().WithLimits(o.limits())
			if v := os.Getenv("AIRLOCK_GVISOR_POOL"); v != "" {
				n, err := strconv.Atoi(v)
				if err != nil || n < 0 {
					return nil, fmt.Errorf("AIRLOCK_GVISOR_POOL=%q: want a pool size >= 0", v)
				}
				cfg = cfg.WithPool(n, 1)
			}
			return gvisor.New(cfg)
		},
	})
}
