// Package starlarkworker is the guarded worker entry for the Starlark
// tier: its constructor and warm-up job (see package worker and
// exprworker).
package starlarkworker

import (
	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/interp/starlark"
	"github.com/airlock-sandbox/airlock/tiers/process/worker"
)

// Entry is the Starlark worker; register it with
// process.RegisterWorkerEntry(starlark.Name, starlarkworker.Entry).
var Entry = worker.Entry{New: New, WarmJob: WarmJob}

// WarmJob is the trivial job a worker runs before it reports ready (see
// exprworker.WarmJob): input variables, arithmetic, a loop, a string
// built-in, a pinned clock and seed. It carries no job data.
const WarmJob = `{"kind":"starlark","code":"n = 0\nfor i in range(3):\n    n += x * 2 + 1 - y % 3\nresult = s + str(n) if len(s) == 2 else s","input":{"x":20,"y":7,"s":"ab"},"clock":"2000-01-01T00:00:00.123456789Z","seed":1}`

// New returns the tier a guarded Starlark worker runs, with the default
// configuration.
func New() airlock.Tier {
	t, err := starlark.New(starlark.NewConfig())
	if err != nil {
		panic("starlark: default config refused: " + err.Error()) // a programming error, caught by the tests
	}
	return t
}
