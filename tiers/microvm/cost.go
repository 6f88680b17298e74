package microvm

import "time"

// Cost is the tier's typical start-up cost on a small machine (a VM booted
// cold). The router (package escalate) orders tiers by it, cheapest first.
func (*Tier) Cost() time.Duration { return 1500 * time.Millisecond }
