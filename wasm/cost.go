package wasm

import "time"

// Cost is the tier's typical start-up cost on a small machine (a compiled
// module instantiated). The router (package escalate) orders tiers by it,
// cheapest first.
func (*Tier) Cost() time.Duration { return 30 * time.Microsecond }
