package tools

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
)

// tree makes DIR/.tools/bin/runsc, a program that does nothing.
func tree(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, ".tools", "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(bin, "runsc")
	if err := os.WriteFile(p, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// A .tools directory found by walking up from the working directory is
// used only if nobody else could have put it there: run as root from a
// directory another user controls, airlock would otherwise run that
// user's runsc as root.
func TestFoundToolsMustBeTrusted(t *testing.T) {
	t.Setenv("AIRLOCK_TOOLS", "")
	t.Setenv("AIRLOCK_RUNSC", "")
	t.Setenv("SUDO_UID", "")

	mine := t.TempDir()
	own := tree(t, mine)
	t.Chdir(mine)
	if got, err := Find("runsc"); err != nil || got != own {
		t.Fatalf("this user's tools: %q, %v", got, err)
	}
	// A program in it that others may write is passed over.
	if err := os.Chmod(own, 0o777); err != nil {
		t.Fatal(err)
	}
	if got, err := Find("runsc"); got == own || (err != nil && !strings.Contains(err.Error(), "writable by others")) {
		t.Errorf("a runsc others may write: %q, %v", got, err)
	}

	theirs := testenv.ForeignDir(t)
	planted := tree(t, theirs)
	for _, p := range []string{filepath.Join(theirs, ".tools"), filepath.Join(theirs, ".tools", "bin"), planted} {
		if err := os.Chown(p, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(theirs)
	if d := Dir(); d == filepath.Join(theirs, ".tools") {
		t.Errorf("another user's tools directory was used")
	}
	got, err := Find("runsc")
	if got == planted {
		t.Fatalf("another user's runsc was found")
	}
	if err != nil && !strings.Contains(err.Error(), "passed over: tools directory "+filepath.Join(theirs, ".tools")) {
		t.Errorf("the error does not say what was passed over: %v", err)
	}
	// Unless that user ran airlock through sudo.
	t.Setenv("SUDO_UID", "65534")
	if got, err := Find("runsc"); got != planted {
		t.Errorf("sudo's caller's tools: %q, %v", got, err)
	}
}
