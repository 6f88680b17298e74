package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/bench"
	"github.com/airlock-sandbox/airlock/corpus/runner"
	"github.com/airlock-sandbox/airlock/internal/testing/runnertest"
)

// testFactories are the registered tiers plus deliberately weakened ones,
// which only this test binary knows.
func testSources() []runner.TierSource {
	return append(corpusSources(), runnertest.Sources()...)
}

// TestMain lets `airlock corpus` re-execute this test binary as its child.
func corpusRun(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := corpusWith(context.Background(), &env{args: args, stdin: strings.NewReader(""), stdout: &out, stderr: &errb}, testSources(), runnertest.Suites()...)
	return out.String(), errb.String(), code
}

// Against a weakened configuration (expr-lang/expr without airlock's
// hardening) `airlock corpus` reports the escape and exits non-zero.
func TestCorpusCommandFailsOnEscape(t *testing.T) {
	out, errOut, code := corpusRun(t, "--tiers", runnertest.Plain+",expr", "--cases", "expr/million-parens", "--timeout", "60s")
	if code != exitFailed {
		t.Fatalf("exit %d, want %d\n%s\n%s", code, exitFailed, out, errOut)
	}
	if !strings.Contains(out, "expr/million-parens on "+runnertest.Plain+": ESCAPED") {
		t.Fatalf("escape not reported:\n%s", out)
	}
}

// Against a gateway whose policy allows everything and a sanitiser that
// passes everything, `airlock corpus` reports the egress and output
// escapes and exits non-zero; the real gateway and sanitiser contain the
// same cases.
func TestCorpusCommandFailsOnWeakenedAreas(t *testing.T) {
	out, errOut, code := corpusRun(t, "--tiers", strings.Join([]string{runnertest.EgressOpen, runnertest.OutputOff, runner.EgressGateway, runner.Sanitiser}, ","),
		"--cases", "egress/http-disallowed-host,output/md-image-inline")
	if code != exitFailed {
		t.Fatalf("exit %d, want %d\n%s\n%s", code, exitFailed, out, errOut)
	}
	for _, want := range []string{
		"egress/http-disallowed-host on " + runnertest.EgressOpen + ": ESCAPED",
		"evidence: the origin saw GET evil.test",
		"output/md-image-inline on " + runnertest.OutputOff + ": ESCAPED",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, real := range []string{"egress/http-disallowed-host on " + runner.EgressGateway, "output/md-image-inline on " + runner.Sanitiser} {
		if strings.Contains(out, real+":") {
			t.Errorf("the real configuration failed (%s):\n%s", real, out)
		}
	}
}

// The same case on the real tier passes, and --json writes the report.
func TestCorpusCommandJSON(t *testing.T) {
	out, errOut, code := corpusRun(t, "--tiers", "expr", "--cases", "expr/million-parens,expr/arith", "--json")
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	var rep runner.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Schema != runner.Schema || len(rep.Counts) != 1 || rep.Counts[0].Contained != 1 || rep.Counts[0].BenignPassed != 1 {
		t.Fatalf("report: %+v", rep)
	}
}

func TestCorpusCommandUsage(t *testing.T) {
	for _, args := range [][]string{{"--tiers", "nope"}, {"--parallel", "0"}, {"stray"}, {"--cases", "no/such-case"}, {"--areas", "no-such-area"}, {"--areas", "expr,no-such-area"}} {
		if _, _, code := corpusRun(t, args...); code != exitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, exitUsage)
		}
	}
}

func TestBenchCommand(t *testing.T) {
	dir := t.TempDir()
	out, errOut, code := run(t, "", "bench", "--tiers", "expr", "--iterations", "20", "--budget", "20ms", "--json", "--out", dir)
	if code != exitOK {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	var rep bench.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Schema != bench.Schema || len(rep.Results) < 4 {
		t.Fatalf("report: %+v", rep)
	}
	for _, f := range []string{"report.json", "chart.svg", "chart.png"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	// A table, compared with the run above.
	out, errOut, code = run(t, "", "bench", "--tiers", "expr", "--iterations", "20", "--budget", "20ms", "--compare", filepath.Join(dir, "report.json"))
	if code != exitOK || !strings.Contains(out, "raw-expr") || !strings.Contains(out, "change against") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	for _, args := range [][]string{{"--iterations", "0"}, {"--tiers", "nope"}, {"--compare", filepath.Join(dir, "missing.json")}} {
		if _, _, code := run(t, "", append([]string{"bench"}, args...)...); code != exitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, exitUsage)
		}
	}
}
