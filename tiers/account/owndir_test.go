package account

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
)

// TestRootKeepsToTheAccount: the account's directories are its user's,
// and root writes in them (account add, set, start, renew). Links the
// user (here uid 65534, a real process) plants there make root neither
// write, chmod nor chown a file outside them, nor copy another account's
// store into this one.
func TestRootKeepsToTheAccount(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skipf(t, "root's account commands need root")
	}
	const nobody = 65534
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	r := Record{Name: "own", UID: nobody, GID: nobody}
	if err := r.Save(dir); err != nil {
		t.Fatal(err)
	}
	if err := r.Prepare(); err != nil {
		t.Fatal(err)
	}
	// What the account's user must not reach: a file and a directory of
	// root's, and another account's store.
	victim := filepath.Join(dir, "victim.txt")
	if err := os.WriteFile(victim, []byte("root's\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	victimDir := filepath.Join(dir, "victimdir")
	if err := os.Mkdir(victimDir, 0o755); err != nil {
		t.Fatal(err)
	}
	other := Record{Name: "other", UID: 0, GID: 0}
	if err := other.Save(dir); err != nil {
		t.Fatal(err)
	}
	if err := other.Prepare(); err != nil {
		t.Fatal(err)
	}
	const otherSecret = "other-account-secret-4242"
	if err := AddStatic(other.StorePath(), "theirs", otherSecret, 0, 0); err != nil {
		t.Fatal(err)
	}
	asUser := func(script string) {
		t.Helper()
		cmd := exec.Command("/bin/sh", "-c", script)
		cmd.Dir = r.Home()
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("as uid %d: %s: %v: %s", nobody, script, err, out)
		}
	}
	victimUnchanged := func(what string) {
		t.Helper()
		data, _ := os.ReadFile(victim)
		st, err := os.Stat(victim)
		if err != nil || string(data) != "root's\n" || st.Mode().Perm() != 0o600 || st.Sys().(*syscall.Stat_t).Uid != 0 {
			t.Errorf("%s: root's file outside the account changed: %q %v", what, data, st.Mode())
		}
		dst, err := os.Stat(victimDir)
		if err != nil || dst.Mode().Perm() != 0o755 || dst.Sys().(*syscall.Stat_t).Uid != 0 {
			t.Errorf("%s: root's directory outside the account changed: %v", what, dst.Mode())
		}
		if ents, _ := os.ReadDir(victimDir); len(ents) > 0 && what != "renew" {
			t.Errorf("%s: root wrote into a directory outside the account: %v", what, ents)
		}
	}

	// account set: a link at the store's side file.
	asUser("ln -s ../victim.txt credentials.json.tmp")
	if err := AddStatic(r.StorePath(), "mine", "my-value-0123456", nobody, nobody); err != nil {
		t.Logf("set with a planted link: %v", err)
	}
	victimUnchanged("set through a side file")

	// account set: the store itself a link to another account's.
	asUser("rm -f credentials.json credentials.json.tmp && ln -s ../other/credentials.json credentials.json")
	if err := AddStatic(r.StorePath(), "mine", "my-value-0123456", nobody, nobody); err == nil {
		t.Error("set through a store that is a link: no error")
	} else {
		t.Logf("set through a linked store: %v", err)
	}
	if err := SetCallers(r.StorePath(), "theirs", []string{"uid-1"}, nobody, nobody); err == nil {
		t.Error("set --caller through a store that is a link: no error")
	}
	filepath.WalkDir(r.Home(), func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if data, _ := os.ReadFile(p); bytes.Contains(data, []byte(otherSecret)) {
				t.Errorf("another account's credential was copied into %s", p)
			}
		}
		return nil
	})

	// account add again: tmp made a link to a directory of root's.
	asUser("rm -f credentials.json && rmdir tmp && ln -s ../victimdir tmp")
	if err := r.Prepare(); err == nil {
		t.Error("add over a tmp that is a link: no error")
	}
	victimUnchanged("add")

	// account start: the log a link to root's file.
	asUser("rm -f tmp && mkdir tmp && ln -s ../victim.txt executor.log")
	if f, err := r.OpenLog(); err == nil {
		f.Close()
		t.Error("the executor's log through a link: opened")
	}
	victimUnchanged("start")
	if data, err := r.ReadLog(); err == nil {
		t.Errorf("the executor's log read through a link: %q", data)
	}
	asUser("rm -f executor.log")
	f, err := r.OpenLog()
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := f.Stat(); st.Sys().(*syscall.Stat_t).Uid != nobody {
		t.Errorf("the log is not the account's: uid %d", st.Sys().(*syscall.Stat_t).Uid)
	}
	f.Close()

	// account renew: the executor's TLS directory a link to root's, which
	// holds a certificate the renewal would read.
	if err := r.Prepare(); err != nil {
		t.Fatal(err)
	}
	if err := r.MakeTLS([]string{"127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	cert, err := os.ReadFile(filepath.Join(r.TLSDir(), "server.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(victimDir, "server.pem"), cert, 0o644); err != nil {
		t.Fatal(err)
	}
	asUser("rm -rf tls && ln -s ../victimdir tls")
	if _, err := r.RenewTLS(time.Now(), true); err == nil {
		t.Error("renew through a linked TLS directory: no error")
	} else if !strings.Contains(err.Error(), "tls") {
		t.Errorf("renew through a linked TLS directory: %v", err)
	}
	if ents, _ := os.ReadDir(victimDir); len(ents) != 1 {
		t.Errorf("renew wrote into a directory outside the account: %v", ents)
	}
	victimUnchanged("renew")
}
