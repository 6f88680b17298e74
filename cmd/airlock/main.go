// Command airlock runs untrusted code inside the cheapest isolation boundary
// that still holds. See `airlock help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	// The light roles, started before the heavy initialisers.
	_ "github.com/airlock-sandbox/airlock/cmd/airlock/internal/earlyexpr"
	_ "github.com/airlock-sandbox/airlock/cmd/airlock/internal/earlystage"
	"github.com/airlock-sandbox/airlock/internal/tierset"
	"github.com/airlock-sandbox/airlock/role"
)

// The tiers start this binary again in their roles: a sandbox's stage or
// agent, a guarded worker, an egress forwarder. It dispatches from init,
// where the runtime holds the startup thread locked, as the process tier's
// container and filter stages need (see package role); tierset.Roles
// registers the guarded workers the worker role runs.
func init() { role.Run(tierset.Roles()) }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
