package server

import (
	"fmt"
	"strings"
	"testing"
	"unsafe"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/approve"
)

// TestConsoleKeepsTheLatestRuns: the runs page keeps the latest
// maxKeptRuns records, oldest first, with outputs truncated.
func TestConsoleKeepsTheLatestRuns(t *testing.T) {
	c := newConsole()
	const n = maxKeptRuns + 44
	for i := 1; i <= n; i++ {
		c.ran(Record{Tenant: "a"}, 0, &airlock.Result{Stdout: strings.Repeat("x", maxKeptOutput+1)})
	}
	kept := c.keptRuns()
	if len(kept) != maxKeptRuns || kept[0].ID != n-maxKeptRuns+1 || kept[len(kept)-1].ID != n {
		t.Fatalf("kept %d runs, %d to %d", len(kept), kept[0].ID, kept[len(kept)-1].ID)
	}
	for i := 1; i < len(kept); i++ {
		if kept[i].ID != kept[i-1].ID+1 {
			t.Fatalf("out of order at %d: %d after %d", i, kept[i].ID, kept[i-1].ID)
		}
	}
	if len(kept[0].Res.Stdout) != maxKeptOutput {
		t.Errorf("stdout kept: %d bytes", len(kept[0].Res.Stdout))
	}
}

// TestChartAxis: the start-up chart's axis is logarithmic, a decade
// apart per tick, labelled with units.
func TestChartAxis(t *testing.T) {
	var s Server
	s.metrics.run("process", "ok", 0, 3*1e6) // 3 ms
	cv := s.latencyChart()
	if len(cv.Rows) != 1 || len(cv.Rows[0].Bars) != 1 || cv.Rows[0].Median != "median ≤ 5 ms" {
		t.Fatalf("rows %+v", cv.Rows)
	}
	step := cv.Ticks[1].X - cv.Ticks[0].X
	for i := 1; i < len(cv.Ticks); i++ {
		if d := cv.Ticks[i].X - cv.Ticks[i-1].X; d < step-1e-9 || d > step+1e-9 {
			t.Errorf("tick %d is %g from the last, not %g", i, d, step)
		}
	}
	var labels []string
	for _, tk := range cv.Ticks {
		labels = append(labels, tk.Label)
	}
	if got := strings.Join(labels, ","); got != "10 µs,100 µs,1 ms,10 ms,100 ms,1 s,10 s,100 s" {
		t.Errorf("labels %s", got)
	}
}

// TestConsoleKeepsLittleOfEachRun: the runs page keeps a few KiB of each
// output, copied, and a few collected files: a slice of the run's
// outputs would keep them whole (MiBs a run, for maxKeptRuns runs).
func TestConsoleKeepsLittleOfEachRun(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	res := &airlock.Result{Stdout: big[:1<<20-1], Stderr: big[:1<<20-2], Value: big[:1<<20-3], Files: map[string]string{},
		Error: &airlock.ErrorInfo{Kind: airlock.ErrRuntime, Message: big}, Stopped: &airlock.Stop{Reason: airlock.StopDenied, Detail: big}}
	for i := range 100 {
		res.Files[fmt.Sprintf("f%03d", i)] = big[i:]
	}
	kept := keptResult(res)
	shares := func(a, b string) bool {
		return len(a) > 0 && len(b) > 0 && unsafe.StringData(a) == unsafe.StringData(b)
	}
	for name, p := range map[string][2]string{
		"stdout": {kept.Stdout, res.Stdout}, "stderr": {kept.Stderr, res.Stderr},
		"error": {kept.Error.Message, res.Error.Message}, "stop": {kept.Stopped.Detail, res.Stopped.Detail},
	} {
		if len(p[0]) > maxKeptOutput || shares(p[0], p[1]) {
			t.Errorf("%s: kept %d bytes, sharing the run's: %v", name, len(p[0]), shares(p[0], p[1]))
		}
	}
	if len(kept.Files) > maxKeptFiles {
		t.Errorf("kept %d collected files, want at most %d", len(kept.Files), maxKeptFiles)
	}
	for name, c := range kept.Files {
		if len(c) > maxKeptOutput || shares(c, res.Files[name]) {
			t.Errorf("file %s: kept %d bytes, sharing the run's: %v", name, len(c), shares(c, res.Files[name]))
		}
	}
	if v, _ := kept.Value.(string); v == res.Value || len(v) > maxKeptOutput {
		t.Errorf("kept a value of %d bytes", len(v))
	}
	if res.Stdout != big[:1<<20-1] || len(res.Files) != 100 || res.Error.Message != big {
		t.Error("keptResult changed the run's result")
	}
}

// TestGrantWordsNameCredentials: a level-5 job's credential references
// are granted to it like secrets, and the approver reads them: a job
// granted only credentials is not "None".
func TestGrantWordsNameCredentials(t *testing.T) {
	job := airlock.Job{Kind: airlock.KindCommand, Argv: []string{"gh"}, Grants: airlock.Grants{Credentials: []airlock.Credential{{Env: "GH_TOKEN", Ref: "github-admin"}}}}
	words := strings.Join(grantWords(approve.DisplayOf(&job, "account", "a").Grants), "\n")
	if !strings.Contains(words, "github-admin") || !strings.Contains(words, "GH_TOKEN") || strings.Contains(words, "None") {
		t.Errorf("a job granted a credential is shown as: %s", words)
	}
}
