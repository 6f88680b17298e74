//go:build linux

package agent

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
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
// test binary (a seccomp filter cannot be removed) and checks that
// executing a program is refused with EACCES while forking and new threads
// still work, and that the one exec the filter lets through, from the
// exec page, runs the program (a shell exiting 42).
func TestDenySpawn(t *testing.T) {
	if b, err := os.ReadFile("/proc/sys/vm/mmap_min_addr"); err != nil || mustAtoi(strings.TrimSpace(string(b))) < 2*execPage {
		// The guest agent raises it at boot; the host's is the operator's.
		t.Skipf("this host's vm.mmap_min_addr (%s) lets anyone map the exec page; the microVM suite runs the filter in the guest", strings.TrimSpace(string(b)))
	}
	if os.Getenv("AIRLOCK_TEST_DENY_SPAWN") == "1" {
		path, err := mapExecPath("/bin/sh")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(9)
		}
		if err := denySpawn(); err != nil {
			os.Exit(10)
		}
		if err := exec.Command("/bin/true").Run(); !errors.Is(err, syscall.EACCES) {
			fmt.Fprintln(os.Stderr, "exec /bin/true:", err)
			os.Exit(11)
		}
		if pid, _, errno := syscall.RawSyscall(syscall.SYS_FORK, 0, 0, 0); errno != 0 {
			os.Exit(12)
		} else if pid == 0 {
			syscall.RawSyscall(syscall.SYS_EXIT_GROUP, 0, 0, 0)
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
		fmt.Fprintln(os.Stderr, execAt(path, []string{"sh", "-c", "exit 42"}, nil))
		os.Exit(13)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestDenySpawn$")
	cmd.Env = append(os.Environ(), "AIRLOCK_TEST_DENY_SPAWN=1")
	out, err := cmd.CombinedOutput()
	if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 42 {
		t.Fatalf("child: %v, want exit 42 from the exec page's program\n%s", err, out)
	}
}

func mustAtoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}
