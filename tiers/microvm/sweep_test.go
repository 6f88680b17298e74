package microvm

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/tiers/internal/lease"
)

// TestSweep plants an orphaned VM directory (its owner, named as earlier
// versions did, is a process that has exited) with a live process named
// like one of our VMs, one whose owner's lease is dead, and a directory
// owned by this live process; New must kill and remove the first two
// (and the dead lease) and keep the third.
func TestSweep(t *testing.T) {
	state := t.TempDir()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	orphan := filepath.Join(state, vmNamePrefix+"orphan")
	leased := filepath.Join(state, vmNamePrefix+"leased")
	live := filepath.Join(state, vmNamePrefix+"live")
	for _, d := range []string{orphan, leased, live} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(orphan, "owner"), []byte(strconv.Itoa(dead.Process.Pid)+" 1"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := writeOwner(live); err != nil {
		t.Fatal(err)
	}
	gone, err := lease.Own(ownersDir(state), ownerPrefix, os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	gone.Release(false) // as when its process died
	if err := os.WriteFile(filepath.Join(leased, "owner"), []byte(gone.Name()), 0o600); err != nil {
		t.Fatal(err)
	}
	// A stand-in for an orphaned QEMU: its command line carries the name.
	// ("; exit 0" keeps sh from exec-ing sleep, which would drop the name.)
	vmProc := exec.Command("sh", "-c", "sleep 60; exit 0", "-name", vmNamePrefix+"orphan")
	vmProc.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := vmProc.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- vmProc.Wait() }()
	t.Cleanup(func() { _ = syscall.Kill(-vmProc.Process.Pid, syscall.SIGKILL) })
	if err := os.WriteFile(filepath.Join(orphan, "vmm.pid"), []byte(strconv.Itoa(vmProc.Process.Pid)), 0o600); err != nil {
		t.Fatal(err)
	}
	// Start returns once the child is forked, possibly before it has
	// exec'd sh: until then its command line is still this test binary's,
	// and the sweep rightly refuses to kill it. Wait for the exec.
	for deadline := time.Now().Add(10 * time.Second); !isOurVM(vmProc.Process.Pid, vmNamePrefix+"orphan"); {
		if time.Now().After(deadline) {
			t.Fatal("the stand-in VM process never showed its name in its command line")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := New(testConfig().WithStateDir(state)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the orphaned VM process was not killed")
	}
	for _, p := range []string{orphan, leased, gone.Path()} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Fatalf("orphaned %s still there: %v", p, err)
		}
	}
	if _, err := os.Stat(live); err != nil {
		t.Fatalf("a live owner's VM directory was removed: %v", err)
	}
}

// TestSweepSparesDirectoryBeingMade: a VM directory is made before its
// owner file is written (and a file is empty for a moment as it is
// written): another process's sweep in that window must not take the
// directory for an orphan and remove it under the VM being launched. A
// directory left that way by a crash, long enough ago, is still swept.
func TestSweepSparesDirectoryBeingMade(t *testing.T) {
	state := t.TempDir()
	bare := filepath.Join(state, vmNamePrefix+"bare")
	empty := filepath.Join(state, vmNamePrefix+"empty")
	for _, d := range []string{bare, empty} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(empty, "owner"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := sweep(state); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{bare, empty} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("a directory just made, its owner not yet written, was swept: %v", err)
		}
	}
	// The same, left by a crash long ago: swept.
	old := time.Now().Add(-time.Hour)
	for _, d := range []string{bare, empty} {
		if err := os.Chtimes(d, old, old); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := sweep(state); err != nil || n != 2 {
		t.Errorf("sweep of two old ownerless directories: %d removed, %v", n, err)
	}
	for _, d := range []string{bare, empty} {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("an old ownerless directory %s was kept: %v", d, err)
		}
	}
}
