package server

import (
	"strings"
	"testing"
)

// TestConfigAccounts: the accounts section and tenants' allowlists are
// checked when the configuration loads, each mistake in one line.
func TestConfigAccounts(t *testing.T) {
	key := HashKey("k")
	for _, c := range []struct{ yaml, want string }{
		{"accounts: [{name: prod, socket: /run/x.sock, uid: 990}]\ntenants: [{name: t, key_sha256: " + key + ", accounts: [prod]}]", ""},
		{"accounts: [{name: prod}]\ntenants: [{name: t, key_sha256: " + key + ", accounts: [prod]}]", ""},
		{"tenants: [{name: t, key_sha256: " + key + ", accounts: [prod]}]", ""},
		{"accounts: [{name: prod, socket: /run/x.sock}]\ntenants: [{name: t, key_sha256: " + key + "}]", "accounts[0].uid: the uid"},
		{"accounts: [{name: Prod}]\ntenants: [{name: t, key_sha256: " + key + "}]", "accounts[0].name"},
		{"accounts: [{name: prod, url: https://h:1}]\ntenants: [{name: t, key_sha256: " + key + "}]", "needs url, ca, cert and key"},
		{"accounts: [{name: prod, socket: /s, uid: 1, url: https://h:1, ca: a, cert: b, key: c}]\ntenants: [{name: t, key_sha256: " + key + "}]", "not both"},
		{"accounts: [{name: prod}, {name: prod}]\ntenants: [{name: t, key_sha256: " + key + "}]", "two accounts named"},
		{"accounts: [{name: prod}]\ntenants: [{name: t, key_sha256: " + key + ", accounts: [dev]}]", `tenants[0].accounts[0]: no account "dev"`},
		{"tenants: [{name: t, key_sha256: " + key + ", accounts: [prod, prod]}]", "listed twice"},
	} {
		_, err := ParseConfig([]byte(c.yaml))
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n")) {
			t.Errorf("%s:\n err = %v, want %q", c.yaml, err, c.want)
		}
	}
}
