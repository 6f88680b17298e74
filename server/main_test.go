package server_test

import (
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testing/roletest"
	"github.com/airlock-sandbox/airlock/internal/tierset"
)

// TestMain lets the tiers re-execute this test binary in their roles.
func TestMain(m *testing.M) { roletest.Main(m, tierset.Roles()) }
