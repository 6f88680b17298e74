package account

import (
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testing/roletest"
	"github.com/airlock-sandbox/airlock/tiers/process"
)

// TestMain lets the process tier, an inner tier in some tests,
// re-execute this test binary in its roles.
func TestMain(m *testing.M) {
	roletest.Main(m, process.Roles())
}
