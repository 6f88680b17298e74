package main

import (
	"encoding/json"
	"testing"

	"github.com/airlock-sandbox/airlock/bench"
	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
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

// The gVisor whole-process row is paired with `runsc run` of the very
// sandbox the tier makes for the job, which must itself run.
func TestBenchGVisorReference(t *testing.T) {
	r, closeAll, err := (&routerFlags{}).open()
	if err != nil {
		t.Fatal(err)
	}
	why := r.Unavailable("gvisor")
	closeAll()
	if why != nil {
		testenv.Skipf(t, "the gvisor tier is unavailable here: %v", why)
	}
	out, errOut, code := run(t, "", "bench", "--tiers", "gvisor", "--iterations", "5", "--budget", "10ms", "--json")
	if code != exitOK {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	var rep bench.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	rows := map[string]bench.Result{}
	for _, r := range rep.Results {
		if r.Mode == "cold" {
			rows[r.Name] = r
		}
	}
	ref, ok := rows["runsc-run-tier"]
	if !ok || ref.Error != "" || ref.P50 <= 0 {
		t.Fatalf("runsc-run-tier: %+v (present %v)", ref, ok)
	}
	if cli := rows["cli-run-gvisor"]; cli.Error != "" || cli.Raw != "runsc-run-tier" || !cli.Paired || cli.RawRatio <= 0 {
		t.Errorf("cli-run-gvisor: %+v", cli)
	}
}
