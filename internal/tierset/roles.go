package tierset

import (
	"github.com/airlock-sandbox/airlock/interp/expr"
	"github.com/airlock-sandbox/airlock/interp/starlark"
	"github.com/airlock-sandbox/airlock/role"
	"github.com/airlock-sandbox/airlock/tiers/gvisor"
	"github.com/airlock-sandbox/airlock/tiers/microvm"
	"github.com/airlock-sandbox/airlock/tiers/process"
	"github.com/airlock-sandbox/airlock/tiers/process/worker/exprworker"
	"github.com/airlock-sandbox/airlock/tiers/process/worker/starlarkworker"
)

// Roles are the roles of every tier built here that re-executes the
// running binary, for role.Run: the process tier's stages, workers and
// forwarder, the gVisor agent, the microvm egress forwarder. It registers
// the guarded workers first, so that a worker started in its role finds
// the tier it runs.
func Roles() []role.Role {
	registerWorkers()
	var rs []role.Role
	for _, t := range [][]role.Role{process.Roles(), gvisor.Roles(), microvm.Roles()} {
		rs = append(rs, t...)
	}
	return rs
}

// registerWorkers names the guarded workers for process.NewGuarded and for
// the worker role.
func registerWorkers() {
	process.RegisterWorkerEntry(expr.Name, exprworker.Entry)
	process.RegisterWorkerEntry(starlark.Name, starlarkworker.Entry)
}
