// Package role runs the roles a program takes when a tier re-executes it:
// the process tier's sandbox stages, guarded workers and egress forwarder,
// the gVisor tier's agent inside a sandbox, the microvm tier's egress
// forwarder. A tier that re-executes the running binary needs that
// binary's main to hand over to the role before it does anything else:
//
//	func main() {
//		role.Run(process.Roles(), gvisor.Roles())
//		...
//	}
//
// The tier names the role in the environment (Env) of the process it
// starts; a process started without it never enters a role, and Run
// returns at once. The package imports little (no fmt, no path/filepath),
// so that a role dispatched early (RunEarly) waits for little.
//
// Some roles apply restrictions to the thread they run on (the process
// tier's container and filter stages unshare namespaces and load Landlock
// rules per thread, then fork the program from it) and need that thread
// to stay theirs. Run does not lock it: call Run from main after an init
// function of package main called runtime.LockOSThread (main then runs
// locked on the startup thread), or from an init function of package
// main, where the runtime holds the startup thread locked.
package role

import (
	"embed"
	"os"
	"strconv"
)

// Env names the role of a re-executed process. Its value is one of the
// roles' names.
const Env = "_AIRLOCK_ROLE"

// A Role is one thing a re-executed binary does instead of its own main.
type Role struct {
	Name string
	// Main runs the role and returns the process's exit status.
	Main func() int
	// Wants, when set, says whether this process is one Main serves; a
	// role of that name it declines is left to a later dispatch (see
	// RunEarly).
	Wants func() bool
}

// Sources is this package's code, part of the code digest that tells
// whether a separate stage binary speaks its caller's protocol.
//
//go:embed role.go
var Sources embed.FS

// Run runs the role this process was started in, among roles, and exits
// with its status; it refuses a role it does not know with one line on
// standard error and status 2. In a process started without a role it
// returns at once.
func Run(roles ...[]Role) {
	name := os.Getenv(Env)
	if name == "" {
		return
	}
	RunEarly(roles...)
	prog := os.Args[0]
	for i := len(prog) - 1; i >= 0; i-- {
		if prog[i] == '/' {
			prog = prog[i+1:]
			break
		}
	}
	os.Stderr.WriteString(prog + ": unknown role " + strconv.Quote(name) + " in " + Env + ": this binary was not built to serve it\n")
	os.Exit(2)
}

// RunEarly is Run for the roles of a binary that would otherwise wait for
// its heavy package initialisers: it runs this process's role if roles
// has it (and its Wants, if set, agrees) and exits; otherwise it returns,
// leaving the role, or the refusal of an unknown one, to Run. Call it
// from the init function of a package of the binary that imports only
// those roles' code: Go initialises a package as soon as its imports
// are, on the startup thread, locked.
func RunEarly(roles ...[]Role) {
	name := os.Getenv(Env)
	if name == "" {
		return
	}
	for _, rs := range roles {
		for _, r := range rs {
			if r.Name == name && (r.Wants == nil || r.Wants()) {
				os.Exit(r.Main())
			}
		}
	}
}
