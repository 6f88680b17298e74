//go:build linux

package agent

import (
	"errors"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"testing"
)

func TestEventCount(t *testing.T) {
	ev := "low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\n"
	if n := eventCount(ev, "oom_kill"); n != 2 {
		t.Fatalf("oom_kill %d", n)
	}
	if n := eventCount(ev, "oom_group_kill"); n != 0 {
		t.Fatalf("absent key %d", n)
	}
}

func TestLookPath(t *testing.T) {
	if p, err := lookPath("/x/y", ""); err != nil || p != "/x/y" {
		t.Fatalf("%q %v", p, err)
	}
	if _, err := lookPath("no-such-program-airlock", ""); err == nil {
		t.Fatal("found a program that does not exist")
	}
}

// TestDenySpawn installs the spawn filter in a re-executed copy of this
// test binary (a seccomp filter cannot be removed) and checks that new
// processes are refused with EPERM while new threads still start.
func TestDenySpawn(t *testing.T) {
	if os.Getenv("AIRLOCK_TEST_DENY_SPAWN") == "1" {
		if err := denySpawn(); err != nil {
			os.Exit(10)
		}
		err := exec.Command("/bin/true").Run()
		if !errors.Is(err, syscall.EPERM) {
			os.Exit(11)
		}
		var wg sync.WaitGroup
		for range 4 { // force new OS threads: clone with CLONE_THREAD
			wg.Add(1)
			go func() {
				defer wg.Done()
				runtime.LockOSThread()
			}()
		}
		wg.Wait()
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestDenySpawn$")
	cmd.Env = append(os.Environ(), "AIRLOCK_TEST_DENY_SPAWN=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
}
