package process

import (
	"github.com/airlock-sandbox/airlock/role"
	"github.com/airlock-sandbox/airlock/tiers/process/internal/stage"
	wk "github.com/airlock-sandbox/airlock/tiers/process/worker"
)

// Roles are the roles this tier starts the running binary in: the
// sandbox's stages (when no separate stage binary is used), the spawner,
// guarded workers and the egress forwarder. A program that uses the tier
// passes them to role.Run first thing in main; the container and filter
// stages need the startup thread (see package role).
func Roles() []role.Role {
	return append(append([]role.Role(nil), stage.Roles...),
		role.Role{Name: stage.Worker, Main: func() int { return wk.Main(registeredWorker) }},
		role.Role{Name: stage.Forwarder, Main: forwarderMain},
	)
}
