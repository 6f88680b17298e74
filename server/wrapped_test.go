package server_test

import (
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/server"
)

// TestWrappedConfig: a tenant's wrapped servers are checked when the
// configuration loads, and their lifetime against the tenant's limits
// when the server is built.
func TestWrappedConfig(t *testing.T) {
	base := "tenants:\n  - name: a\n    key_sha256: " + server.HashKey(keyA) + "\n    mcp_wrapped:\n"
	for _, c := range []struct{ body, want string }{
		{"      - {name: 'a/b', argv: [node]}\n", "mcp_wrapped[0].name"},
		{"      - {name: x, argv: []}\n", "tenants[0].mcp_wrapped[0]"},
		{"      - {name: x, argv: [node]}\n      - {name: x, argv: [node]}\n", "two wrapped servers named"},
		{"      - {name: x, argv: [node], policy: {default: maybe}}\n", "mcp_wrapped[0].policy"},
		{"      - {name: x, argv: [node], policy: {tools: {t: {aproval: true}}}}\n", "aproval"},
		{"      - {name: x, argv: [node], idle_timeout: -1s}\n", "must not be negative"},
		{"      - {name: x, argv: [node], policy: {path_args: [path]}}\n", "need roots"},
		{"      - {name: x, argv: [node], policy: {roots: [/srv], tools: {t: {refuse: {path: ['re:(']}}}}}\n", "mcp_wrapped[0].policy"},
	} {
		_, err := server.ParseConfig([]byte(base + c.body))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an error naming %s", c.body, err, c.want)
		}
	}
	// It runs as the tenant: in its situations, on its tiers.
	for _, c := range []struct{ tenant, body, want string }{
		{"    situations: [public]\n", "      - {name: x, argv: [node], situation: internal}\n", "mcp_wrapped[0].situation: internal is not among the tenant's situations"},
		{"    situation: internal\n", "      - {name: x, argv: [node], situation: public}\n", "mcp_wrapped[0].situation: public is not among"},
		{"    tiers: [microvm]\n", "      - {name: x, argv: [node], tier: process}\n", "mcp_wrapped[0].tier: process is not among the tenant's tiers"},
	} {
		body := "tenants:\n  - name: a\n    key_sha256: " + server.HashKey(keyA) + "\n" + c.tenant + "    mcp_wrapped:\n" + c.body
		_, err := server.ParseConfig([]byte(body))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an error naming %s", body, err, c.want)
		}
	}
	cfg, err := server.ParseConfig([]byte(base + "      - {name: x, argv: [node], max_lifetime: 1h, policy: {default: deny, roots: [/srv], path_args: [path], refuse: {'*': ['*.pem']}, tools: {t: {allow: true, approval: true}}}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newServer(cfg, server.Options{}); err == nil || !strings.Contains(err.Error(), "max_lifetime") {
		t.Errorf("a lifetime above the tenant's maximum wall clock: %v", err)
	}
}
