package egress

import "time"

// SetHeldBodyTimeout sets how long a held body may take to arrive, until
// the test ends.
func SetHeldBodyTimeout(d time.Duration) (restore func()) {
	old := heldBodyTimeout
	heldBodyTimeout = d
	return func() { heldBodyTimeout = old }
}
