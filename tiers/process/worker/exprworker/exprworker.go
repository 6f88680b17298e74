// Package exprworker is the guarded worker entry for the expr tier:
// linking it makes a worker process dispatch as soon as expr and the
// worker package are initialised, before the rest of the binary's package
// initialisers (see package worker).
package exprworker

import (
	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/interp/expr"
	"github.com/airlock-sandbox/airlock/tiers/process/worker"
)

func init() { worker.Dispatch(expr.Name, New, `{"kind":"expr","code":"1 + 1"}`) }

// New returns the tier a guarded expr worker runs; register it with
// process.RegisterWorker(expr.Name, exprworker.New).
func New() airlock.Tier { return expr.New() }
