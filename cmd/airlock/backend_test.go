package main

import (
	"strings"
	"testing"
)

// A tier whose backend is not installed is its own error and exit status,
// saying what is missing and how to install it; a policy refusal stays
// "not admitted".
func TestBackendMissing(t *testing.T) {
	t.Setenv("AIRLOCK_RUNSC", "/nonexistent/runsc")
	_, stderr, code := run(t, "", "run", "--tier", "gvisor", "--", "true")
	if code != exitMissing || !strings.Contains(stderr, "backend missing: gvisor: AIRLOCK_RUNSC=/nonexistent/runsc") || !strings.Contains(stderr, "make install") {
		t.Errorf("exit %d, want %d; stderr: %s", code, exitMissing, stderr)
	}
	// A missing data file (the guest kernel) is a missing backend as a
	// missing program is, named once, with how to install it.
	t.Setenv("AIRLOCK_MICROVM_KERNEL", "/nonexistent/vmlinux")
	_, stderr, code = run(t, "", "run", "--tier", "microvm", "--", "true")
	if code != exitMissing || !strings.Contains(stderr, "backend missing: microvm: AIRLOCK_MICROVM_KERNEL=/nonexistent/vmlinux: not found") ||
		strings.Contains(stderr, "microvm: microvm:") || !strings.Contains(stderr, "make install") || strings.Count(stderr, "\n") != 1 {
		t.Errorf("exit %d, want %d; stderr: %s", code, exitMissing, stderr)
	}
	t.Setenv("AIRLOCK_MICROVM_KERNEL", "")
	empty := t.TempDir()
	t.Setenv("AIRLOCK_TOOLS", empty)
	_, stderr, code = run(t, "", "run", "--tier", "microvm", "--", "true")
	if code != exitMissing || !strings.Contains(stderr, "backend missing: microvm: "+empty+"/microvm/vmlinux not found") ||
		strings.Contains(stderr, "microvm: microvm:") || strings.Count(stderr, "make setup") != 1 {
		t.Errorf("exit %d, want %d; stderr: %s", code, exitMissing, stderr)
	}
	t.Setenv("AIRLOCK_TOOLS", "")
	// The JSON result keeps the wire's kind.
	stdout, _, code := run(t, `{"kind":"command","argv":["true"],"tier":"gvisor"}`, "run", "--json", "-")
	if code != exitMissing || !strings.Contains(stdout, `"not_admitted"`) {
		t.Errorf("--json: exit %d, want %d; %s", code, exitMissing, stdout)
	}
	// A level-2 tier refused by the policy is a refusal, not a missing
	// backend.
	_, stderr, code = run(t, "", "run", "--tier", "seccomp", "--situation", "public", "--", "true")
	if code != exitNotAdmitted {
		t.Errorf("policy refusal: exit %d, want %d; stderr: %s", code, exitNotAdmitted, stderr)
	}
}
