package lease

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const prefix = "test-owner-"

// TestMain lets the test binary serve as another process that owns a
// lease: with LEASE_HELPER_DIR set it takes one there, prints its name
// and holds it until killed.
func TestMain(m *testing.M) {
	if dir := os.Getenv("LEASE_HELPER_DIR"); dir != "" {
		o, err := Own(dir, prefix, os.Getpid())
		if err != nil {
			fmt.Println("ERROR", err)
			os.Exit(1)
		}
		fmt.Println(o.Name())
		time.Sleep(time.Hour) // until killed
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// owner starts a process that owns a lease in dir and returns its name and
// the process.
func owner(t *testing.T, dir string) (string, *exec.Cmd) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "LEASE_HELPER_DIR="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !IsName(prefix, line[:len(line)-1]) {
		t.Fatalf("helper owner: %q, %v", line, err)
	}
	return line[:len(line)-1], cmd
}

// plant makes state named after owner, as a tier would.
func plant(t *testing.T, state, owner string) string {
	t.Helper()
	p := filepath.Join(state, owner+"-1")
	if err := os.MkdirAll(p, 0o700); err != nil {
		t.Fatal(err)
	}
	return p
}

// clean removes the state of owner.
func clean(state string) func(string) error {
	return func(owner string) error { return os.RemoveAll(filepath.Join(state, owner+"-1")) }
}

// TestLiveNeverSwept checks that a sweep leaves the state of live owners
// (another process's, and one of this process's own) alone and removes a
// dead owner's, lock file and all.
func TestLiveNeverSwept(t *testing.T) {
	dir, state := t.TempDir(), t.TempDir()
	liveName, _ := owner(t, dir)
	deadName, dead := owner(t, dir)
	self, err := Own(dir, prefix, os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	defer self.Release(true)
	sibling, err := Own(dir, prefix, os.Getpid()) // another owner of this process
	if err != nil {
		t.Fatal(err)
	}
	defer sibling.Release(true)
	live, gone, mine, sib := plant(t, state, liveName), plant(t, state, deadName), plant(t, state, self.Name()), plant(t, state, sibling.Name())
	if n := Sweep(dir, prefix, self.Name(), clean(state)); n != 0 {
		t.Fatalf("swept %d owners while all were alive", n)
	}
	_ = dead.Process.Kill()
	_ = dead.Wait()
	if n := Sweep(dir, prefix, self.Name(), clean(state)); n != 1 {
		t.Fatalf("swept %d owners, want the dead one", n)
	}
	for _, p := range []string{live, mine, sib, filepath.Join(dir, liveName), self.Path(), sibling.Path()} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("a live owner's %s was removed: %v", p, err)
		}
	}
	for _, p := range []string{gone, filepath.Join(dir, deadName)} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the dead owner's %s survived: %v", p, err)
		}
	}
	if !Gone(dir, deadName) || Gone(dir, liveName) {
		t.Error("Gone does not tell the removed lock file from the live one")
	}
}

// TestPIDReuse checks that liveness does not depend on the PID in the
// name: an owner named after a running PID that does not hold its lock is
// dead, and one named after a dead PID that holds it is alive.
func TestPIDReuse(t *testing.T) {
	dir := t.TempDir()
	exited := exec.Command("true")
	if err := exited.Run(); err != nil {
		t.Fatal(err)
	}
	hidden, err := Own(dir, prefix, exited.Process.Pid) // as in another PID namespace
	if err != nil {
		t.Fatal(err)
	}
	reused, err := Own(dir, prefix, os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	reused.Release(false) // died; its PID now runs something else (this test)
	var cleaned []string
	Sweep(dir, prefix, "", func(o string) error { cleaned = append(cleaned, o); return nil })
	if len(cleaned) != 1 || cleaned[0] != reused.Name() {
		t.Fatalf("cleaned %v, want only %s", cleaned, reused.Name())
	}
	hidden.Release(true)
}

// TestFailedCleanKeepsLock checks that an owner whose state could not be
// removed keeps its lock file for a later sweep.
func TestFailedCleanKeepsLock(t *testing.T) {
	dir := t.TempDir()
	o, err := Own(dir, prefix, os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	o.Release(false)
	if n := Sweep(dir, prefix, "", func(string) error { return errors.New("busy") }); n != 0 || Gone(dir, o.Name()) {
		t.Fatalf("a failed clean-up removed the owner (%d)", n)
	}
	if n := Sweep(dir, prefix, "", func(string) error { return nil }); n != 1 || !Gone(dir, o.Name()) {
		t.Fatalf("a later sweep did not remove the owner (%d)", n)
	}
}

// TestConcurrentSweepers runs sweeps at once, in this process and in
// others' stead: every dead owner is cleaned exactly once, and a new owner
// taken meanwhile is never cleaned.
func TestConcurrentSweepers(t *testing.T) {
	dir := t.TempDir()
	var dead []string
	for range 20 {
		o, err := Own(dir, prefix, os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		o.Release(false)
		dead = append(dead, o.Name())
	}
	var mu sync.Mutex
	cleaned := map[string]int{}
	var live atomic.Value
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if i == 0 {
				o, err := Own(dir, prefix, os.Getpid())
				if err != nil {
					t.Error(err)
					return
				}
				live.Store(o)
			}
			Sweep(dir, prefix, "", func(o string) error {
				mu.Lock()
				cleaned[o]++
				mu.Unlock()
				return nil
			})
		}()
	}
	close(start)
	wg.Wait()
	for _, d := range dead {
		if cleaned[d] != 1 {
			t.Errorf("dead owner %s cleaned %d times", d, cleaned[d])
		}
	}
	if o, _ := live.Load().(*Owner); o == nil || cleaned[o.Name()] != 0 {
		t.Errorf("the live owner was cleaned (%v)", o)
	} else {
		o.Release(true)
	}
	if len(Owners(dir, prefix)) != 0 {
		t.Errorf("lock files left: %v", Owners(dir, prefix))
	}
}

// TestOwnerOf checks the split of state names into their owner's.
func TestOwnerOf(t *testing.T) {
	for name, want := range map[string]string{
		prefix + "12-0123abcd-1":   prefix + "12-0123abcd",
		prefix + "12-0123abcd-x-y": prefix + "12-0123abcd",
		prefix + "12-0123abcd":     "",
		prefix + "12-0123abcde-1":  "",
		prefix + "12-0123ABCD-1":   "",
		prefix + "x-0123abcd-1":    "",
		"other-12-0123abcd-1":      "",
		prefix + "12-0123456789ab": "",
		prefix + "-0123abcd-1":     "",
	} {
		if got := OwnerOf(prefix, name); got != want {
			t.Errorf("OwnerOf(%q) = %q, want %q", name, got, want)
		}
	}
}

// TestForProcess checks that a process has one owner per directory.
func TestForProcess(t *testing.T) {
	dir := t.TempDir()
	a, err := ForProcess(dir, prefix)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := ForProcess(dir, prefix)
	c, _ := ForProcess(t.TempDir(), prefix)
	if a != b || a == c || TakeDead(dir, a.Name()) != nil {
		t.Fatal("ForProcess: not one held owner per directory")
	}
}

// Sweep is a sweep as the tiers make them: it takes the lock of every
// dead owner in dir but self, calls clean with its name and removes its
// lock file if clean succeeds (else keeps it for a later sweep). It
// returns how many owners it removed.
func Sweep(dir, prefix, self string, clean func(owner string) error) int {
	n := 0
	for _, name := range Owners(dir, prefix) {
		if name == self {
			continue
		}
		l := TakeDead(dir, name)
		if l == nil {
			continue
		}
		if clean(name) != nil {
			l.Keep()
			continue
		}
		l.Remove()
		n++
	}
	return n
}
