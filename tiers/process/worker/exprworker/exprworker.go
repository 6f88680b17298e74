// Package exprworker is the guarded worker entry for the expr tier: its
// constructor and warm-up job (see package worker).
package exprworker

import (
	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/interp/expr"
	"github.com/airlock-sandbox/airlock/tiers/process/worker"
)

// Entry is the expr worker; register it with
// process.RegisterWorkerEntry(expr.Name, exprworker.Entry).
var Entry = worker.Entry{New: New, WarmJob: WarmJob}

// WarmJob is the trivial job a worker runs before it reports ready: input
// variables, arithmetic, a comparison, a string built-in and a
// conditional, and a pinned clock and seed as every job the host sends
// has, so that the common paths of decoding, compiling and running a job
// are touched before the claim (see worker.Entry). It carries no job
// data.
const WarmJob = `{"kind":"expr","code":"x * 2 + 1 - y % 3 > 0 && len(s) == 2 ? s + \"!\" : s","input":{"x":20,"y":7,"s":"ab"},"clock":"2000-01-01T00:00:00.123456789Z","seed":1}`

// New returns the tier a guarded expr worker runs.
func New() airlock.Tier { return expr.New() }
