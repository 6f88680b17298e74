// Package roletest is the TestMain of a test binary that a tier starts
// again in a role (a stage, worker, agent or forwarder), as `main` of the
// airlock binary is.
//
// The process tier's container and filter stages need the startup thread
// locked to them (see package role). The runtime runs every init function
// on that thread, and one that locks it has main, and so TestMain, run on
// it: this package's init does, and Main releases the thread once it knows
// the binary was not started in a role.
package roletest

import (
	"os"
	"runtime"
	"testing"

	"github.com/airlock-sandbox/airlock/role"
)

func init() { runtime.LockOSThread() }

// Main runs the role this test binary was started in, among roles, and
// otherwise the tests.
func Main(m *testing.M, roles ...[]role.Role) {
	os.Exit(Run(m, roles...))
}

// Run is Main returning the tests' exit code, for a TestMain with
// clean-up to do after the tests.
func Run(m *testing.M, roles ...[]role.Role) int {
	role.Run(roles...)
	runtime.UnlockOSThread()
	return m.Run()
}
