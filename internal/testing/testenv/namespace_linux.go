package testenv

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// namespaceChild marks the test binary's run inside the namespaces; its
// value names the test that runs there.
const namespaceChild = "AIRLOCK_TEST_NAMESPACE_CHILD"

// Inside reports whether this run of t's test is the one InNamespaces
// started: the caller then does the half of the test that belongs inside
// the namespaces.
func Inside(t *testing.T) bool {
	return os.Getenv(namespaceChild) == t.Name()
}

// InNamespaces runs t's test again in a child of the test binary, in new
// namespaces (flags such as syscall.CLONE_NEWNET|syscall.CLONE_NEWNS), with
// env added to its environment, and fails t unless the child's run passes
// within timeout. Without root it skips (fails under CI).
func InNamespaces(t *testing.T, flags uintptr, timeout time.Duration, env ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		Skipf(t, "new namespaces need root")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, "-test.run=^"+t.Name()+"$", "-test.v", "-test.count=1")
	cmd.Env = append(append(os.Environ(), namespaceChild+"="+t.Name()), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: flags, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	if err != nil && strings.Contains(err.Error(), "operation not permitted") {
		Skipf(t, "no namespaces here: %v", err)
	}
	if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("the half inside the namespaces failed (%v):\n%s", err, out)
	}
	t.Logf("inside the namespaces:\n%s", out)
}
