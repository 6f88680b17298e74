package tierset

import (
	"os"
	"runtime"
	"testing"

	"github.com/airlock-sandbox/airlock/role"
)

// The process tier's container and filter stages need the startup thread
// locked to them (see package role); TestMain releases it once it knows
// this binary was not started in a role.
func init() { runtime.LockOSThread() }

// TestMain lets the tiers re-execute this test binary in their roles.
func TestMain(m *testing.M) {
	role.Run(Roles())
	runtime.UnlockOSThread()
	os.Exit(m.Run())
}
