package tierset

import (
	"strings"
	"testing"
)

// entry returns the named entry of the set.
func entry(t *testing.T, name string) Entry {
	t.Helper()
	for _, e := range Entries() {
		if e.Name == name {
			return e
		}
	}
	t.Fatalf("the set has no tier %q", name)
	return Entry{}
}

// The list offers each tier once.
func TestEntriesDistinct(t *testing.T) {
	seen := map[string]bool{}
	for _, e := range Entries() {
		if seen[e.Name] {
			t.Errorf("%s listed twice", e.Name)
		}
		seen[e.Name] = true
	}
	for _, name := range []string{"expr", "starlark", "wasm", "seccomp", "guarded-expr", "guarded-starlark", "process", "gvisor", "microvm", "account"} {
		if !seen[name] {
			t.Errorf("%s missing", name)
		}
	}
}

// Settings out of range are refused by Build, naming the setting.
func TestBuildValidates(t *testing.T) {
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{ProcessPool: 65}, "process pool"},
		{Options{ProcessPool: -1}, "process pool"},
		{Options{GVisorPool: -1}, "gVisor pool"},
		{Options{MicroVMPool: -2}, "microVM pool"},
		{Options{MicroVMWarm: "tepid"}, "microVM warm mode"},
	} {
		if _, err := Build(c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error naming %s", c.o, err, c.want)
		}
	}
	if err := (Options{}).Warm().Validate(); err != nil {
		t.Errorf("the warm settings do not validate: %v", err)
	}
}
