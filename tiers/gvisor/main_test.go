package gvisor

import (
	"os"
	"testing"

	"github.com/airlock-sandbox/airlock/role"
)

// TestMain lets the tier run this test binary as the agent inside its
// sandboxes.
func TestMain(m *testing.M) {
	role.Run(Roles())
	os.Exit(m.Run())
}
