package tierset

import (
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testing/roletest"
)

// TestMain lets the tiers re-execute this test binary in their roles.
func TestMain(m *testing.M) { roletest.Main(m, Roles()) }
