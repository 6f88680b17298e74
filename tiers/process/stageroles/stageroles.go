// Package stageroles exports the process tier's sandbox stages, and
// imports nothing else: a large binary dispatches them with role.RunEarly
// from the init function of a package of its own that imports only this
// one, so that a stage starts before the binary's heavy package
// initialisers (see package role). process.Roles includes them.
package stageroles

import (
	"github.com/airlock-sandbox/airlock/role"
	"github.com/airlock-sandbox/airlock/tiers/process/internal/stage"
)

// Roles are the sandbox stages: container, filter, spawner and digest.
func Roles() []role.Role { return stage.Roles }
