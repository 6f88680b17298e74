// Package starlarkworker is the guarded worker entry for the Starlark
// tier (see package worker and exprworker). Starlark's imports (the
// egress policy for its HTTP module) are initialised late, so this entry
// gains less than expr's.
package starlarkworker

import (
	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/interp/starlark"
	"github.com/airlock-sandbox/airlock/tiers/process/worker"
)

func init() { worker.Dispatch(starlark.Name, New, `{"kind":"starlark","code":"result = 1 + 1"}`) }

// New returns the tier a guarded Starlark worker runs, with the default
// configuration; register it with process.RegisterWorker(starlark.Name,
// starlarkworker.New).
func New() airlock.Tier {
	t, err := starlark.New(starlark.NewConfig())
	if err != nil {
		panic("starlark: default config refused: " + err.Error()) // a programming error, caught by the tests
	}
	return t
}
