package gvisor

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock"
)

// TestReference: the bare command line Reference returns runs the very
// sandbox a cold run would (the job's program under the seccomp filter
// that refuses a later execve), and its remove leaves nothing (newTier's
// clean-up checks); a job the tier starts through its agent has none.
func TestReference(t *testing.T) {
	tier := newTier(t, NewConfig())
	ctx := context.Background()
	job := cmdJob("sh", "-c", "echo $(grep -c nobody /etc/passwd) users; exec /bin/true")
	job.Grants.Spawn = false
	argv, remove, err := tier.Reference(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	remove()
	// Without the spawn grant the shell can run no other program: no
	// grep, and no /bin/true.
	if err == nil || strings.Contains(string(out), "1 users") || !strings.Contains(string(out), "users\n") {
		t.Errorf("reference run: %v: %q", err, out)
	}
	if !strings.Contains(strings.Join(argv, " "), "--oci-seccomp run --bundle") {
		t.Errorf("reference command lacks the tier's seccomp flag: %v", argv)
	}
	net := cmdJob("true")
	net.Grants.Net = []airlock.NetRule{{Host: "example.com"}}
	if _, _, err := tier.Reference(ctx, net); err == nil {
		t.Error("a reference for a job the agent starts")
	}
}
