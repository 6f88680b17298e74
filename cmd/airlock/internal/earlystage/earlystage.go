// Package earlystage starts the process tier's stages in the airlock
// binary (when no separate stage binary is used) before the binary's
// heavy package initialisers (goldmark, cel-go, protobuf, gonum/plot,
// wazero, the MCP SDK): Go initialises a package as soon as its imports
// are, and this one imports only the stage's code. Its init runs on the
// startup thread, locked, as the container and filter stages need (see
// package role). Every other role, and the refusal of an unknown one, is
// main's.
package earlystage

import (
	"github.com/airlock-sandbox/airlock/role"
	"github.com/airlock-sandbox/airlock/tiers/process/stageroles"
)

func init() { role.RunEarly(stageroles.Roles()) }
