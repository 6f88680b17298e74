// Package deathsig starts a child that must die with this process.
//
// Linux sends a child its parent-death signal (SysProcAttr.Pdeathsig) when
// the thread that forked it ends, not the process. The Go runtime ends a
// thread when a goroutine locked to it returns (the process tier's /etc
// template does so when the tier closes), and that thread may have forked
// a child earlier: the child would be killed then, long before this
// process ends. Start forks from a thread it keeps until the child exits.
package deathsig

import (
	"os/exec"
	"runtime"
)

// Start starts cmd from an OS thread kept for the child's life and returns
// the child's Wait, to be called once.
func Start(cmd *exec.Cmd) (wait func() error, err error) { return StartIn(cmd, nil) }

// StartIn is Start with setup run first on the thread that forks cmd, for
// per-thread state the child inherits (a network namespace entered with
// unshare). A thread setup ran on ends with the child rather than serve
// other goroutines in a state they do not expect.
func StartIn(cmd *exec.Cmd, setup func() error) (wait func() error, err error) {
	started := make(chan error, 1)
	exited := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if setup == nil {
			defer runtime.UnlockOSThread() // the child is gone: the thread may serve others
		} else if err := setup(); err != nil {
			started <- err
			return
		}
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		exited <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return func() error { return <-exited }, nil
}
