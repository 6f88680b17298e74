package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/tiers/account"
)

// TestAccountFlag: --account names the only account level-5 jobs run
// under, from those registered; without it, several registered accounts
// and no AIRLOCK_ACCOUNT leave no default. Each refusal is one line. No
// executor runs here: the refusals come before any is reached.
func TestAccountFlag(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("AIRLOCK_ACCOUNTS", dir)
	t.Setenv("AIRLOCK_ACCOUNT", "")
	for i, name := range []string{"alpha", "beta"} {
		r := account.Record{Name: name, User: account.UserName(name), UID: 4000 + i, GID: 4000 + i}
		if err := r.Save(dir); err != nil {
			t.Fatal(err)
		}
	}
	sock := func(name string) string { return filepath.Join(dir, name+".run", "executor.sock") }
	// beta's socket exists (nothing answers on it), alpha's does not.
	if err := os.MkdirAll(filepath.Dir(sock("beta")), 0o755); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", sock("beta"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })

	out, _, _ := run(t, "", "explain", "--situation", "credentials", "--account", "beta")
	if !strings.Contains(out, "account:   beta (its executor runs as airlock-beta, uid 4001, on "+sock("beta")) {
		t.Errorf("explain --account beta:\n%s", out)
	}
	out, _, _ = run(t, "", "explain", "--situation", "credentials")
	if !strings.Contains(out, "2 accounts are configured (alpha, beta): choose one with --account NAME") {
		t.Errorf("explain with two accounts:\n%s", out)
	}
	for _, c := range []struct {
		job  string
		args []string
		want string
	}{
		// The job names an account --account does not allow.
		{`{"kind":"command","argv":["true"],"situation":"credentials","account":"alpha"}`, []string{"--account", "beta"}, "account alpha is not one this caller is configured to use (configured: beta)"},
		{`{"kind":"command","argv":["true"],"situation":"credentials"}`, []string{"--account", "gamma"}, "no account gamma"},
		{`{"kind":"command","argv":["true"],"situation":"credentials"}`, nil, "2 accounts are configured (alpha, beta)"},
		// Named, a registered account is reached (its executor is not running).
		{`{"kind":"command","argv":["true"],"situation":"credentials","account":"alpha"}`, nil, "the executor of account alpha is not running"},
		// Below level 5, a job naming an account is refused.
		{`{"kind":"expr","code":"1","account":"alpha"}`, nil, "a job naming an account runs only at level 5"},
	} {
		out, _, code := run(t, c.job, append(append([]string{"run", "--json"}, c.args...), "-")...)
		if code == exitOK || !strings.Contains(out, c.want) || !strings.Contains(out, `"not_admitted"`) {
			t.Errorf("%s %v: exit %d\n%s\nwant %q", c.job, c.args, code, out, c.want)
		}
	}
}
