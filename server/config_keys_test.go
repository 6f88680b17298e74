package server_test

import (
	"os"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/server"
)

// A configuration reads one way only: a tenant's tiers or situation given
// twice (encoding/json keeps the last), or in another case than the
// field's name (it matches anyway), or anything after the configuration,
// is an error, not a tenant allowed more than its reviewer read.
func TestConfigReadsOneWay(t *testing.T) {
	key := strings.Repeat("a", 64)
	for _, c := range []struct{ config, want string }{
		{`{"tenants": [{"name": "a", "key_sha256": "` + key + `", "tiers": ["expr"], "tiers": ["expr", "gvisor"]}]}`, "tenants.tiers: given twice"},
		{`{"tenants": [{"name": "a", "key_sha256": "` + key + `", "situation": "public", "Situation": "internal", "situations": ["public", "internal"]}]}`, `write the field as "situation"`},
		{"tenants:\n  - name: a\n    key_sha256: " + key + "\n    tiers: [expr]\n    Tiers: [expr, gvisor]\n", `write the field as "tiers"`},
		{`{"tenants": [{"name": "a", "key_sha256": "` + key + `"}]} {"tenants": []}`, "more data after the configuration"},
	} {
		_, err := server.ParseConfig([]byte(c.config))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", c.config, err, c.want)
		}
	}
	// An empty allow-list reads as "none" and would mean "any": an error.
	for _, field := range []string{"tiers", "images", "situations"} {
		_, err := server.ParseConfig([]byte("tenants:\n  - name: a\n    key_sha256: " + key + "\n    " + field + ": []\n"))
		if err == nil || !strings.Contains(err.Error(), "tenants[0]."+field+": an empty list") {
			t.Errorf("%s: []: %v", field, err)
		}
	}
	// The sample configuration still reads.
	data, err := os.ReadFile("../examples/serve.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := server.ParseConfig(data); err != nil {
		t.Errorf("examples/serve.yaml: %v", err)
	}
}
