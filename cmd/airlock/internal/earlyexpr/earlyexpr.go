// Package earlyexpr starts a guarded expr worker in the airlock binary
// before the binary's heavy package initialisers, as earlystage does for
// the stages: it imports only the worker and the expr interpreter. A
// worker of another language is main's.
package earlyexpr

import (
	"os"

	"github.com/airlock-sandbox/airlock/interp/expr"
	"github.com/airlock-sandbox/airlock/role"
	"github.com/airlock-sandbox/airlock/tiers/process/worker"
	"github.com/airlock-sandbox/airlock/tiers/process/worker/exprworker"
)

func init() {
	role.RunEarly([]role.Role{{
		Name:  worker.RoleName,
		Wants: func() bool { return os.Getenv(worker.Env) == expr.Name },
		Main: func() int {
			return worker.Main(func(string) (worker.Entry, bool) { return exprworker.Entry, true })
		},
	}})
}
