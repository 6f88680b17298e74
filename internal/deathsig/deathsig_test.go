//go:build linux

package deathsig

import (
	"os/exec"
	"runtime"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
)

var start = Start

// onRetiredThread runs fn on a thread that ends when fn returns (never the
// main thread, which the runtime keeps).
func onRetiredThread(fn func()) {
	done := make(chan struct{})
	var run func()
	run = func() {
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			go run() // this thread is locked: the new goroutine gets another
			runtime.UnlockOSThread()
			return
		}
		fn()
		close(done)
	}
	go run()
	<-done
}

// TestChildOutlivesTheCallersThread: the goroutine that starts the child
// is locked to its thread and returns, which ends the thread; the child
// runs on to its own end (forked from that thread itself, its
// parent-death signal would kill it at once).
func TestChildOutlivesTheCallersThread(t *testing.T) {
	if _, err := exec.LookPath("sleep"); err != nil {
		testenv.Skipf(t, "no sleep: %v", err)
	}
	cmd := exec.Command("sleep", "0.5")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var wait func() error
	var err error
	onRetiredThread(func() { wait, err = start(cmd) })
	if err != nil {
		t.Fatal(err)
	}
	if err := wait(); err != nil {
		t.Fatalf("the child was killed: %v", err)
	}
}

// TestStartError: a program that cannot start is Start's error.
func TestStartError(t *testing.T) {
	if _, err := Start(exec.Command("/nonexistent/program")); err == nil {
		t.Fatal("started a program that does not exist")
	}
}
