package process

import (
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testing/roletest"
	"github.com/airlock-sandbox/airlock/role"
)

// TestMain lets the tier re-execute this test binary in its roles (a
// stage, the spawner, a worker, the forwarder) and in the tests' own.
func TestMain(m *testing.M) {
	roletest.Main(m, Roles(), []role.Role{
		{Name: spawnerCallerRole, Main: spawnerCaller},
		{Name: pipeEchoRole, Main: pipeEcho},
	})
}
