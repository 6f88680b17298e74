package mcpwrap_test

import (
	"os"
	"testing"

	"github.com/airlock-sandbox/airlock/role"
	"github.com/airlock-sandbox/airlock/tiers/gvisor"
	"github.com/airlock-sandbox/airlock/tiers/process"
)

// TestMain lets the tiers of the start benchmark run this test binary in
// their roles (gVisor's agent inside its sandboxes, the process tier's).
func TestMain(m *testing.M) {
	role.Run(append(gvisor.Roles(), process.Roles()...))
	os.Exit(m.Run())
}
