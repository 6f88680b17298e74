package mcpwrap_test

import (
	"os"
	"testing"

	"github.com/airlock-sandbox/airlock/role"
	"github.com/airlock-sandbox/airlock/tiers/gvisor"
)

// TestMain lets the gVisor tier of the start benchmark run this test
// binary as the agent inside its sandboxes.
func TestMain(m *testing.M) {
	role.Run(gvisor.Roles())
	os.Exit(m.Run())
}
