// Command airlock-stage is the process tier's sandbox stage as a small
// binary of its own: PID 1 of a level-3 container and the level-2 stage,
// the same code (package stage) the airlock binary carries, without the
// rest of airlock. It starts in a fraction of the time a re-executed
// airlock binary takes, which is most of a cold sandbox's start.
//
// The process tier runs it itself (never run it by hand): it uses the
// binary $AIRLOCK_AIRLOCK_STAGE names, else looks for airlock-stage next
// to the running executable, in the tools directory's bin and on $PATH,
// and uses it only if it carries the same stage code (see
// stage.CodeDigest) and only root or the tier's own user may write it;
// otherwise it re-executes its own binary. Build it beside the program
// that uses the tier:
//
//	CGO_ENABLED=0 go build -o bin/airlock-stage ./tiers/process/cmd/airlock-stage
package main

import (
	"fmt"
	"os"

	"github.com/airlock-sandbox/airlock/role"
	"github.com/airlock-sandbox/airlock/tiers/process/internal/stage"
)

// The stage runs from init, where the runtime holds the startup thread
// locked, as the container and filter stages need (see package role);
// main runs only when something other than the tier starts this binary.
func init() { role.Run(stage.Roles) }

func main() {
	fmt.Fprintln(os.Stderr, "airlock-stage: started by airlock's process tier for each sandbox; it is not a command to run by hand")
	os.Exit(2)
}
