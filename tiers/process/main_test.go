package process

import (
	"os"
	"runtime"
	"testing"

	"github.com/airlock-sandbox/airlock/role"
)

// The container and filter stages need the startup thread locked to them
// (see package role); TestMain releases it once it knows this binary was
// not started in a role.
func init() { runtime.LockOSThread() }

// TestMain lets the tier re-execute this test binary in its roles (a
// stage, the spawner, a worker, the forwarder) and in the tests' own.
func TestMain(m *testing.M) {
	role.Run(Roles(), []role.Role{
		{Name: spawnerCallerRole, Main: spawnerCaller},
		{Name: pipeEchoRole, Main: pipeEcho},
	})
	runtime.UnlockOSThread()
	os.Exit(m.Run())
}
