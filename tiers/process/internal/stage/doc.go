// Package stage is the inside of a process-tier sandbox: PID 1 of a
// level-3 container (build the root, wait for the job, confine and fork
// the program, reap, report) and the level-2 stage, started by the process
// package executing airlock-stage (cmd/airlock-stage, this package alone)
// or re-executing its own binary, with a private variable set.
//
// Its init dispatches the stage and never returns. Go initialises packages
// in import-path order, each as soon as its imports are initialised, so
// this package imports as little as it can (the standard library's early
// packages and x/sys/unix; the seccomp program arrives assembled): it is then
// initialised before the binary's heavy packages (goldmark, gonum/plot,
// cel-go, protobuf, the egress proxy), whose initialisers never run in a
// sandbox. Anything that would import a late package — egress, os/signal,
// path/filepath, a cgroup library — stays out, or runs as a separate
// process (the egress forwarder). The process package's
// TestStageInitOrder guards this.
package stage
