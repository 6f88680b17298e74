//go:build unix

package tools

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
)

// A local user (nobody, a real uid) links .tools in a shared temporary
// directory to a tools directory of root's, above where root runs airlock.
// The link passed the checks (they looked where it led) and the tools were
// then run by the link's name, which the user can point at a directory of
// their own after the check: root would run their runsc. A tools directory
// reached through another user's link is passed over.
func TestFoundToolsThroughAnotherUsersLink(t *testing.T) {
	t.Setenv("AIRLOCK_TOOLS", "")
	t.Setenv("AIRLOCK_RUNSC", "")
	t.Setenv("SUDO_UID", "")
	tmp := testenv.SharedTmp(t)
	roots := filepath.Join(filepath.Dir(tmp), "roots")
	tree(t, roots)
	work := filepath.Join(tmp, "work")
	if err := os.Mkdir(work, 0o755); err != nil {
		t.Fatal(err)
	}
	testenv.AsNobody(t, `ln -s "$2/.tools" "$1/.tools"; mkdir -p "$1/mine/bin"; printf '#!/bin/sh\necho theirs\n' > "$1/mine/bin/runsc"; chmod 755 "$1/mine/bin/runsc"`, tmp, roots)
	t.Chdir(work)
	got, err := Find("runsc")
	// The user points the link at their own directory.
	testenv.AsNobody(t, `ln -sfn "$1/mine" "$1/.tools"`, tmp)
	if err == nil {
		real, _ := filepath.EvalSymlinks(got)
		if !strings.HasPrefix(real, roots+"/") {
			t.Errorf("root would run %s, now %s: another user's link chose it", got, real)
		}
	}
	if d := Dir(); strings.HasPrefix(d, tmp) {
		t.Errorf("the tools directory is %s, through another user's link", d)
	}
}
