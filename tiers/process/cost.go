package process

import "time"

// Cost is the tier's typical start-up cost on a small machine: a filtered
// process, or a container started cold. The router (package escalate)
// orders tiers by it, cheapest first.
func (t *Tier) Cost() time.Duration { return t.lv.cost() }

// Cost is the typical cost of a job on a started guarded worker: the
// interpreter's run plus the round trip to the worker. The router
// (package escalate) orders tiers by it, cheapest first.
func (g *Guarded) Cost() time.Duration {
	switch g.name {
	case "expr":
		return 100 * time.Microsecond
	case "starlark":
		return 150 * time.Microsecond
	}
	return 200 * time.Microsecond
}
