package main

import (
	"encoding/json"
	"testing"

	"github.com/airlock-sandbox/airlock/bench"
)

// airlock bench shows the whole-process rows: eval, run start to exit,
// each with its ratio against its paired reference.
func TestBenchWholeProcessRows(t *testing.T) {
	out, errOut, code := run(t, "", "bench", "--tiers", "expr", "--iterations", "5", "--budget", "10ms", "--json")
	if code != exitOK {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	var rep bench.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range rep.Results {
		if r.Name == "cli-eval" && r.Mode == "cold" {
			found = true
			if r.Error != "" || r.Raw != "cli-version" || r.RawRatio <= 0 {
				t.Errorf("cli-eval: %+v", r)
			}
		}
	}
	if !found {
		t.Fatalf("no cli-eval row: %s", out)
	}
}
