package runner_test

import (
	"context"
	"errors"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/corpus"
	"github.com/airlock-sandbox/airlock/corpus/runner"
	"github.com/airlock-sandbox/airlock/internal/testing/runnertest"
	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
	"github.com/airlock-sandbox/airlock/internal/testing/tiertest"
	"github.com/airlock-sandbox/airlock/internal/tierset"
	"github.com/airlock-sandbox/airlock/internal/tools"
	"github.com/airlock-sandbox/airlock/role"
	"github.com/airlock-sandbox/airlock/wasm"
)

// sources are the real tiers plus the weakened ones; the re-executed
// test binary builds its tier from the same list.
func sources() []runner.TierSource {
	return append(runnertest.TierSources(), runnertest.Sources()...)
}

// The process tier's container and filter stages need the startup thread
// locked to them (see package role); TestMain releases it once it knows
// this binary was not started in a role.
func init() { runtime.LockOSThread() }

// TestMain lets the tiers re-execute this test binary in their roles, and
// the runner in its children.
func TestMain(m *testing.M) {
	role.Run(tierset.Roles())
	runtime.UnlockOSThread()
	if runner.IsChild() {
		os.Exit(runner.Child(sources(), os.Stdin, os.Stdout, os.Stderr, runnertest.Suites()...))
	}
	os.Exit(m.Run())
}

func config() runner.Config {
	return runner.NewConfig(sources(), "-test.run=^$").WithTimeout(20 * time.Second)
}

func run(t *testing.T, c runner.Config) *runner.Report {
	t.Helper()
	rep, err := runner.Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range rep.Verdicts {
		t.Logf("%s on %s: %s (%s) %s %v", v.Case, v.Tier, v.Result, v.Outcome, v.Detail, v.Evidence)
	}
	return rep
}

func verdict(t *testing.T, rep *runner.Report, id, tier string) runner.Verdict {
	t.Helper()
	for _, v := range rep.Verdicts {
		if v.Case == id && v.Tier == tier {
			return v
		}
	}
	t.Fatalf("no verdict for %s on %s", id, tier)
	return runner.Verdict{}
}

// The plain library dies on a million '(' (a fatal stack overflow that
// recover cannot catch): the runner survives, and counts it as an escape.
func TestUnhardenedExprCrashIsAnEscape(t *testing.T) {
	c := config().WithTiers(runnertest.Plain, "expr").WithCaseIDs("expr/million-parens", "expr/arith").WithTimeout(60 * time.Second)
	rep := run(t, c)
	v := verdict(t, rep, "expr/million-parens", runnertest.Plain)
	if v.Result != runner.Escaped || v.Outcome != "died" {
		t.Fatalf("million parens on the plain library: %s (%s), want escaped (died)", v.Result, v.Outcome)
	}
	if !slices.ContainsFunc(v.Evidence, func(e string) bool { return strings.Contains(e, "stack") }) {
		t.Errorf("evidence does not show the stack overflow: %q", v.Evidence)
	}
	if got := verdict(t, rep, "expr/million-parens", "expr"); got.Result != runner.Contained {
		t.Errorf("the real expr tier: %s (%s)", got.Result, got.Detail)
	}
	if got := verdict(t, rep, "expr/arith", runnertest.Plain); got.Result != runner.BenignPassed {
		t.Errorf("benign case on the plain library: %s (%s)", got.Result, got.Detail)
	}
	if !rep.Failed() {
		t.Fatal("the report does not fail on an escape")
	}
}

// An area no selected tier runs is listed as not covered.
func TestIdleArea(t *testing.T) {
	rep := run(t, config().WithTiers("expr").WithCaseIDs("expr/arith", "starlark/load-canary-file"))
	if len(rep.Uncovered) == 0 || rep.Uncovered[0].Area != "starlark" {
		t.Fatalf("not covered: %+v", rep.Uncovered)
	}
}

// Each canary is caught on a tier that hands the host to the code, and
// none is reached through the real expression tier.
func TestCanariesCatchLeaks(t *testing.T) {
	c := config().WithCases(runnertest.Cases()...).WithTiers(runnertest.Leaky, "expr")
	rep := run(t, c)
	evidence := map[string]string{
		"canary/env":  "canary-env-",
		"canary/file": "canary-file-",
		"canary/http": "HTTP GET /",
		"canary/dns":  "DNS A ",
	}
	for id, want := range evidence {
		v := verdict(t, rep, id, runnertest.Leaky)
		if v.Result != runner.Escaped {
			t.Errorf("%s on the leaky tier: %s (%s), want escaped", id, v.Result, v.Detail)
			continue
		}
		if !strings.Contains(strings.Join(append(v.Evidence, v.Detail), "\n"), want) {
			t.Errorf("%s: evidence %q lacks %q", id, v.Evidence, want)
		}
		if real := verdict(t, rep, id, "expr"); real.Result != runner.Contained {
			t.Errorf("%s on the real expr tier: %s (%s)", id, real.Result, real.Detail)
		}
	}
	for _, tier := range []string{runnertest.Leaky, "expr"} {
		if v := verdict(t, rep, "canary/benign", tier); v.Result != runner.BenignPassed {
			t.Errorf("benign case on %s: %s (%s)", tier, v.Result, v.Detail)
		}
	}
	if !rep.Failed() {
		t.Fatal("the report does not fail on an escape")
	}
}

// A tier that ignores its deadline hangs its child: the runner kills the
// child (and its process group) and counts an escape; an unavailable tier
// is reported and its cases skipped with the reason.
func TestHangAndUnavailable(t *testing.T) {
	cases := runnertest.Cases()
	c := config().WithCases(cases[0], cases[len(cases)-1]).WithTiers(runnertest.Hang, runnertest.Down).WithTimeout(time.Second)
	start := time.Now()
	rep := run(t, c)
	if d := time.Since(start); d > time.Minute {
		t.Errorf("the hung child was not bounded: %v", d)
	}
	v := verdict(t, rep, "canary/env", runnertest.Hang)
	if v.Result != runner.Escaped || !strings.Contains(v.Detail, "still running") {
		t.Errorf("hang: %s (%s)", v.Result, v.Detail)
	}
	if v := verdict(t, rep, "canary/benign", runnertest.Hang); v.Result != runner.BenignBlocked {
		t.Errorf("benign on hang: %s (%s)", v.Result, v.Detail)
	}
	for _, v := range rep.Verdicts {
		if v.Tier == runnertest.Down && (v.Result != runner.SkippedCase || !strings.Contains(v.Detail, "not installed")) {
			t.Errorf("down tier: %s (%s)", v.Result, v.Detail)
		}
	}
	var down runner.Count
	for _, n := range rep.Counts {
		if n.Tier == runnertest.Down {
			down = n
		}
	}
	if down.Skipped != 2 || down.Contained+down.Escaped+down.BenignPassed+down.BenignBlocked != 0 {
		t.Errorf("down tier counts: %+v", down)
	}
}

// Every case of the starlark area that touches a canary, and a sample of
// the rest, holds on the real tiers.
func TestRealTiersHold(t *testing.T) {
	ids := []string{"expr/million-brackets", "expr/repeat-huge", "expr/arith", "starlark/load-canary-file", "starlark/module-members-no-env"}
	rep := run(t, config().WithTiers("expr", "starlark").WithCaseIDs(ids...))
	if rep.Failed() {
		t.Fatalf("escapes or blocked benign cases on the real tiers: %+v", rep.Counts)
	}
	n := 0
	for _, v := range rep.Verdicts {
		if v.Result == runner.Contained || v.Result == runner.BenignPassed {
			n++
		}
	}
	if n != len(ids) {
		t.Fatalf("%d of %d cases judged", n, len(ids))
	}
}

func TestBadConfig(t *testing.T) {
	if _, err := runner.Run(context.Background(), config().WithTiers("nope")); err == nil {
		t.Error("unknown tier accepted")
	}
	if _, err := runner.Run(context.Background(), config().WithCaseIDs("nope/nope")); err == nil {
		t.Error("unknown case accepted")
	}
	if _, err := runner.Run(context.Background(), config().WithParallel(0)); err == nil {
		t.Error("parallel 0 accepted")
	}
}

// The corpus the runner loads by default is the embedded one.
func TestLoadsEveryArea(t *testing.T) {
	cases, err := corpus.Load()
	if err != nil {
		t.Fatal(err)
	}
	areas := map[string]bool{}
	for _, c := range cases {
		areas[c.Area] = true
	}
	for _, a := range corpus.Areas() {
		if !areas[a] {
			t.Errorf("area %s has no cases", a)
		}
	}
}

// WASM cases get their modules from the source tree (wat2wasm for the WAT
// ones, the Go toolchain for the guest program) and run in children like
// the rest, the granted directory and canaries included.
func TestWasmCases(t *testing.T) {
	root := runner.FindSource()
	if root == "" {
		testenv.Skipf(t, "no source tree above the test's directory to build the WASM cases from")
	}
	if _, err := tools.Find("wat2wasm"); err != nil {
		testenv.Skipf(t, "wat2wasm (scripts/setup-wabt.sh installs it): %v", err)
	}
	mods, cleanup, err := runner.SourceModules(root)
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	// One case first, alone: it fills the compilation cache.
	c := config().WithTiers(wasm.Name).WithModules(mods)
	if rep := run(t, c.WithCaseIDs("wasm/hello").WithParallel(1)); rep.Failed() {
		t.Fatalf("wasm/hello: %+v", rep.Verdicts)
	}
	ids := []string{"wasm/spin-function", "wasm/env-dump", "wasm/symlink-absolute", "wasm/hello", "wasm/read-grant"}
	rep := run(t, c.WithCaseIDs(ids...))
	if rep.Failed() {
		t.Fatalf("escapes or blocked benign cases: %+v", rep.Counts)
	}
	for _, id := range ids {
		if v := verdict(t, rep, id, wasm.Name); v.Result == runner.SkippedCase {
			t.Errorf("%s skipped: %s", id, v.Detail)
		}
	}
}

// tally counts verdicts of one tier and area by result.
func tally(rep *runner.Report, tier, area string) map[string]int {
	n := map[string]int{}
	for _, v := range rep.Verdicts {
		if v.Tier == tier && v.Area == area {
			n[v.Result]++
		}
	}
	return n
}

// Every egress case runs against the real gateway and every output case
// through the real sanitiser, each in a child, and all hold.
func TestEgressAndOutputAreas(t *testing.T) {
	rep := run(t, config().WithAreas("egress", "output").WithTiers(runner.EgressGateway, runner.Sanitiser))
	if rep.Failed() {
		t.Fatalf("escapes or blocked benign cases: %+v", rep.Counts)
	}
	for _, want := range []struct{ tier, area string }{{runner.EgressGateway, "egress"}, {runner.Sanitiser, "output"}} {
		n := tally(rep, want.tier, want.area)
		if n[runner.Contained] < 10 || n[runner.BenignPassed] < 3 || n[runner.SkippedCase] > 0 {
			t.Errorf("%s on %s: %v", want.area, want.tier, n)
		}
	}
	if len(rep.Uncovered) > 0 {
		t.Errorf("areas not covered: %+v", rep.Uncovered)
	}
}

// The approval cases hold on the real process and Starlark tiers.
func TestApprovalArea(t *testing.T) {
	rep := run(t, config().WithAreas("approval").WithTiers("process", "starlark"))
	for _, c := range rep.Counts {
		if c.Tier == "process" && c.Skipped > 0 {
			tiertest.Unavailable(t, "process", errors.New(c.SkipReason))
		}
	}
	if rep.Failed() {
		t.Fatalf("escapes or blocked benign cases: %+v", rep.Counts)
	}
	for _, tier := range []string{"process", "starlark"} {
		if n := tally(rep, tier, "approval"); n[runner.Contained] < 4 || n[runner.BenignPassed] < 1 {
			t.Errorf("approval on %s: %v", tier, n)
		}
	}
}

// The server cases hold against the real API on loopback.
func TestServerArea(t *testing.T) {
	rep := run(t, config().WithAreas("server").WithTiers(runner.ServerTier))
	if rep.Failed() {
		t.Fatalf("escapes or blocked benign cases: %+v", rep.Counts)
	}
	if n := tally(rep, runner.ServerTier, "server"); n[runner.Contained] < 8 || n[runner.BenignPassed] < 2 {
		t.Errorf("server: %v", n)
	}
	// Cases that do not name the server are not run through it.
	rep = run(t, config().WithTiers(runner.ServerTier).WithCaseIDs("expr/arith", "server/expr-benign"))
	if len(rep.Verdicts) != 1 || rep.Verdicts[0].Case != "server/expr-benign" {
		t.Errorf("verdicts on the server: %+v", rep.Verdicts)
	}
}

// caseOn returns the corpus case with id, marked for tier only.
func caseOn(t *testing.T, area, id, tier string) corpus.Case {
	t.Helper()
	cases, err := corpus.Load(area)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		if c.ID == id {
			c.Tiers = []string{tier}
			return c
		}
	}
	t.Fatalf("no case %s", id)
	return corpus.Case{}
}

// Each new area, run against a deliberately weakened configuration — a
// gateway whose policy allows everything, a sanitiser that passes every
// document, a process tier that ignores the approval's placed-files check,
// a server whose tenant may do anything unapproved — reports an escape
// with evidence, and the report fails.
func TestWeakenedAreasEscape(t *testing.T) {
	// The cases, re-aimed at the weakened tiers.
	swapped := caseOn(t, "approval", "approval/placed-content-swapped", runnertest.Unchecked)
	missing := caseOn(t, "server", "server/approval-missing", runnertest.ServerOpen)
	c := config().WithSuites(runnertest.Suites()...).WithCases(swapped, missing).
		WithTiers(runnertest.EgressOpen, runnertest.OutputOff, runnertest.Unchecked, runnertest.ServerOpen).
		WithCaseIDs("egress/http-disallowed-host", "egress/http-get-allowed", "output/md-image-inline", swapped.ID, missing.ID)
	rep := run(t, c)
	for _, want := range []struct{ id, tier, evidence string }{
		{"egress/http-disallowed-host", runnertest.EgressOpen, "the origin saw GET evil.test"},
		{"output/md-image-inline", runnertest.OutputOff, "evil.example"},
		{swapped.ID, runnertest.Unchecked, "SWAPPED"},
		{missing.ID, runnertest.ServerOpen, "outcome ok"},
	} {
		v := verdict(t, rep, want.id, want.tier)
		if v.Result == runner.SkippedCase && want.tier == runnertest.Unchecked {
			tiertest.Unavailable(t, "process", errors.New(v.Detail))
		}
		if v.Result != runner.Escaped {
			t.Errorf("%s on %s: %s (%s), want escaped", want.id, want.tier, v.Result, v.Detail)
			continue
		}
		if all := strings.Join(append(v.Evidence, v.Detail), "\n"); !strings.Contains(all, want.evidence) {
			t.Errorf("%s: evidence %q lacks %q", want.id, all, want.evidence)
		}
	}
	if v := verdict(t, rep, "egress/http-get-allowed", runnertest.EgressOpen); v.Result != runner.BenignPassed {
		t.Errorf("benign egress case on the open gateway: %s (%s)", v.Result, v.Detail)
	}
	if !rep.Failed() {
		t.Fatal("the report does not fail on the escapes")
	}
}
