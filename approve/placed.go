package approve

import (
	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/value"
)

// MaxPlacedBytes bounds what [Placed] reads back from one sandbox.
const MaxPlacedBytes = value.MaxJobBytes

// PlacedCheck returns the check a tier runs after placing files (see
// [airlock.WithPlacedCheck]): it recomputes the digest over the placed files and
// refuses with [Stale] when it differs from want.
func PlacedCheck(job airlock.Job, tier, tenant string, want Digest) func(dir string) error {
	return func(dir string) error {
		got, err := Placed(&job, tier, tenant, dir)
		if err != nil {
			return stale(err.Error())
		}
		if got != want {
			return stale("the placed files differ from the approved ones (digest " + string(got) + ", approved " + string(want) + ")")
		}
		return nil
	}
}
