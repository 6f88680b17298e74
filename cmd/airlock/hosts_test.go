package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// --hosts pins a name to the operator's address (here a loopback origin,
// which no name reaches unpinned) for a net-granted job, and --egress-log
// appends the gateway's decisions as JSON lines.
func TestHostsAndEgressLog(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "pinned") }))
	defer origin.Close()
	port := origin.URL[strings.LastIndexByte(origin.URL, ':')+1:]
	dir := t.TempDir()
	script := filepath.Join(dir, "get.star")
	hosts := filepath.Join(dir, "hosts")
	log := filepath.Join(dir, "egress.jsonl")
	os.WriteFile(script, []byte(`result = http.get("http://origin.test:`+port+`/").body`+"\n"), 0o644)
	os.WriteFile(hosts, []byte("127.0.0.1 origin.test\n"), 0o644)
	args := []string{"run", script, "--situation", "expression", "--allow-net", "origin.test:" + port}

	// Unpinned, the name does not resolve to the origin.
	if out, _, code := run(t, "", args...); code == exitOK {
		t.Fatalf("an unpinned name reached the loopback origin: %s", out)
	}
	out, stderr, code := run(t, "", append(args, "--hosts", hosts, "--egress-log", log)...)
	if code != exitOK || strings.TrimSpace(out) != `"pinned"` {
		t.Fatalf("exit %d: %s %s", code, out, stderr)
	}
	data, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	line, _, _ := strings.Cut(string(data), "\n")
	if err := json.Unmarshal([]byte(line), &rec); err != nil || !strings.Contains(line, "origin.test") || !strings.Contains(line, "allow") {
		t.Fatalf("log line %q: %v", line, err)
	}
	// A bad pins file is one line of invalid input.
	os.WriteFile(hosts, []byte("not-an-address origin.test\n"), 0o644)
	if _, stderr, code := run(t, "", append(args, "--hosts", hosts)...); code != exitUsage || strings.Count(stderr, "\n") != 1 {
		t.Errorf("bad hosts file: exit %d: %s", code, stderr)
	}
}
