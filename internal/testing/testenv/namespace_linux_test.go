package testenv

import (
	"os"
	"syscall"
	"testing"
	"time"
)

// TestInNamespaces: the half inside sees a network namespace of its own
// from the outer half's.
func TestInNamespaces(t *testing.T) {
	if Inside(t) {
		inside, err := os.Readlink("/proc/self/ns/net")
		if err != nil {
			t.Fatal(err)
		}
		if inside == os.Getenv("TESTENV_OUTER_NET") {
			t.Fatalf("the child runs in the outer network namespace %s", inside)
		}
		return
	}
	host, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	InNamespaces(t, syscall.CLONE_NEWNET, time.Minute, "TESTENV_OUTER_NET="+host)
}
