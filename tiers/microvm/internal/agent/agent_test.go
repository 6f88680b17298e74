//go:build linux

package agent

import "testing"

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
