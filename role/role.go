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
// returns at once.
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
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
)

// Env names the role of a re-executed process. Its value is one of the
// roles' names.
const Env = "_AIRLOCK_ROLE"

// A Role is one thing a re-executed binary does instead of its own main.
type Role struct {
	Name string
	// Main runs the role and returns the process's exit status.
	Main func() int
}

// Sources is this package's code, part of the code digest that tells
// whether a separate stage binary speaks its caller's protocol.
//
//go:embed role.go
var Sources embed.FS

var ran atomic.Bool

// Run runs the role this process was started in, among roles, and exits
// with its status; it refuses a role it does not know with one line on
// standard error and status 2. In a process started without a role it
// returns at once.
func Run(roles ...[]Role) {
	name := os.Getenv(Env)
	if name == "" {
		ran.Store(true)
		return
	}
	for _, rs := range roles {
		for _, r := range rs {
			if r.Name == name {
				os.Exit(r.Main())
			}
		}
	}
	fmt.Fprintf(os.Stderr, "%s: unknown role %q in %s: this binary was not built to serve it\n", filepath.Base(os.Args[0]), name, Env)
	os.Exit(2)
}

// Ran reports whether Run has been called in this process (and found no
// role): a tier that re-executes the running binary checks it, so that a
// program whose main does not dispatch fails with a reason rather than
// starting its own main inside a sandbox.
func Ran() bool { return ran.Load() }
