//go:build linux

package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
	"github.com/airlock-sandbox/airlock/tiers/account"
)

// An accounts directory in a shared temporary directory that a local
// user (nobody, a real uid) made first, with a link in it named as the
// account, is refused before root makes a user or writes anything: root
// would have chmodded and written where the link leads.
func TestAccountsDirPreparedByAnotherUser(t *testing.T) {
	tmp := testenv.SharedTmp(t)
	victim := filepath.Join(filepath.Dir(tmp), "victim")
	if err := os.Mkdir(victim, 0o755); err != nil {
		t.Fatal(err)
	}
	const name = "statedirprobe"
	dir := filepath.Join(tmp, "accounts")
	testenv.AsNobody(t, `mkdir -m 755 "$1"; ln -s "$2" "$1/$3"; ln -s "$2" "$1/$3.run"`, dir, victim, name)
	t.Cleanup(func() {
		if _, err := user.Lookup(account.UserName(name)); err == nil {
			exec.Command("userdel", account.UserName(name)).Run()
		}
	})
	t.Setenv("AIRLOCK_ACCOUNTS", dir)
	var out, errOut bytes.Buffer
	code := Run(context.Background(), []string{"account", "add", name}, strings.NewReader(""), &out, &errOut)
	msg := strings.TrimSpace(errOut.String())
	if code == 0 || !strings.Contains(msg, dir+" belongs to uid 65534") || strings.Contains(msg, "\n") {
		t.Errorf("account add in another user's directory: exit %d, %q", code, msg)
	}
	if _, err := user.Lookup(account.UserName(name)); err == nil {
		t.Error("the account's user was made")
	}
	if st, err := os.Stat(victim); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("where the link led: %v %v", st.Mode(), err)
	}
	if ents, _ := os.ReadDir(victim); len(ents) > 0 {
		t.Errorf("root wrote %s where the link led", ents[0].Name())
	}
}

// An image store named below another user's link (nobody's, in a shared
// temporary directory) is refused, and nothing is made where it leads.
func TestImageStoreBelowAnotherUsersLink(t *testing.T) {
	tmp := testenv.SharedTmp(t)
	victim := filepath.Join(filepath.Dir(tmp), "victim")
	if err := os.Mkdir(victim, 0o755); err != nil {
		t.Fatal(err)
	}
	testenv.AsNobody(t, `ln -s "$2" "$1/airlock"`, tmp, victim)
	var out, errOut bytes.Buffer
	code := Run(context.Background(), []string{"images", "--images", filepath.Join(tmp, "airlock", "images")}, strings.NewReader(""), &out, &errOut)
	msg := strings.TrimSpace(errOut.String())
	if code == 0 || !strings.Contains(msg, "is a symbolic link of uid 65534") || strings.Contains(msg, "\n") {
		t.Errorf("an image store below another user's link: exit %d, %q", code, msg)
	}
	if ents, _ := os.ReadDir(victim); len(ents) > 0 {
		t.Errorf("root made %s where the link led", ents[0].Name())
	}
}
