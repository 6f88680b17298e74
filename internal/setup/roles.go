package setup

import (
	"github.com/airlock-sandbox/airlock/role"
	"github.com/airlock-sandbox/airlock/tiers/gvisor"
	"github.com/airlock-sandbox/airlock/tiers/microvm"
	"github.com/airlock-sandbox/airlock/tiers/process"
)

// Roles are the roles of every tier registered here that re-executes the
// running binary, for role.Run: the process tier's stages, workers and
// forwarder, the gVisor agent, the microvm egress forwarder.
func Roles() []role.Role {
	var rs []role.Role
	for _, t := range [][]role.Role{process.Roles(), gvisor.Roles(), microvm.Roles()} {
		rs = append(rs, t...)
	}
	return rs
}
