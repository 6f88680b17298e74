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

func init() { worker.Dispatch(expr.Name, New, WarmJob) }

// WarmJob is the trivial job a worker runs before it reports ready: input
// variables, arithmetic, a comparison, a string built-in and a
// conditional, and a pinned clock and seed as every job the host sends
// has, so that the common paths of decoding, compiling and running a job
// are touched before the claim (see worker.Dispatch). It carries no job
// data.
const WarmJob = `{"kind":"expr","code":"x * 2 + 1 - y % 3 > 0 && len(s) == 2 ? s + \"!\" : s","input":{"x":20,"y":7,"s":"ab"},"clock":"2000-01-01T00:00:00.123456789Z","seed":1}`

// New returns the tier a guarded expr worker runs; register it with
// process.RegisterWorker(expr.Name, exprworker.New).
func New() airlock.Tier { return expr.New() }
