package setup

import (
	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/wasm"
)

func init() {
	Register(Factory{
		Name:  wasm.Name,
		Level: airlock.LevelInterpreter,
		Order: 30,
		New: func(o Options) (airlock.Tier, error) {
			return wasm.New(WasmConfig(o))
		},
	})
}

// WasmConfig is the WASM tier's configuration for the CLI and the server:
// the operator's limits and the on-disk compilation cache (see
// wasm.DefaultCacheDir), so that a second process starts warm, and an
// egress gateway per run with network rules (decisions in the result).
func WasmConfig(o Options) wasm.Config {
	return wasm.NewConfig().WithLimits(o.limits()).WithCacheDir(wasm.DefaultCacheDir()).WithEgress(egress.Config{})
}
