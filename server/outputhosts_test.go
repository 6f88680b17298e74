package server

import (
	"strings"
	"testing"
)

// TestOutputHostsConfig: output_hosts entries are checked when the
// configuration is read, relaxed: entries included.
func TestOutputHostsConfig(t *testing.T) {
	base := "tenants: [{name: a, key_sha256: " + HashKey("k") + "}]\n"
	c, err := ParseConfig([]byte(base + `output_hosts: [docs.example.com, "*.cdn.example.com", "relaxed:search.example.com"]` + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.OutputHosts) != 3 {
		t.Errorf("output_hosts: %v", c.OutputHosts)
	}
	for _, bad := range []string{`[relax:search.example.com]`, `["relaxed:"]`, `[127.0.0.1]`, `["https://docs.example.com"]`, `[{relaxed: search.example.com}]`} {
		if _, err := ParseConfig([]byte(base + "output_hosts: " + bad + "\n")); err == nil || !strings.Contains(err.Error(), "output_hosts") {
			t.Errorf("output_hosts: %s: %v", bad, err)
		}
	}
}
