package gvisor

import "time"

// Cost is the tier's typical start-up cost on a small machine (a sandbox
// started cold). The router (package escalate) orders tiers by it,
// cheapest first.
func (*Tier) Cost() time.Duration { return 400 * time.Millisecond }
