package contract

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/image"
)

// contractCase is one line of testdata/cases.jsonl: a job in the wire
// format and the outcome every tier must give it.
type contractCase struct {
	Name string `json:"name"`
	// Contract is the rule the case checks, as SECURITY.md states it.
	Contract string          `json:"contract"`
	Job      json.RawMessage `json:"job"`
	Want     outcome         `json:"want"`
	// Gaps are the tiers that do not meet the case yet, each with the
	// reason SECURITY.md's contract table states for it. On such a tier
	// the case must still fail: one that passes has its gap closed, and
	// the case and the table must say so.
	Gaps map[string]string `json:"gaps,omitempty"`
	// On is the outcome on a tier where the contract itself says it
	// differs (a pinned clock: shown where the tier can set it, refused
	// where it cannot), as SECURITY.md's table states.
	On map[string]outcome `json:"on,omitempty"`
	// Session runs the job in a session of its own, on the tiers that
	// keep sessions (the others skip the case): a job means the same in
	// a session as alone, or the session refuses it.
	Session bool `json:"session,omitempty"`
	// Then is a second job run in the same session once the first has
	// given its outcome, and the outcome it must give (a session case
	// only): what one run leaves for the next.
	Then *nextRun `json:"then,omitempty"`
}

// nextRun is a case's second job in its session.
type nextRun struct {
	Job  json.RawMessage `json:"job"`
	Want outcome         `json:"want"`
}

// outcome is what a run must give. Fields left zero are not checked,
// except that a case expecting neither a stop nor an error expects the
// run to end with neither.
type outcome struct {
	Exit    *int   `json:"exit,omitempty"`
	Stopped string `json:"stopped,omitempty"` // the stop reason
	// StopDetail is a regular expression the stop's detail must match:
	// the same words on every tier.
	StopDetail string `json:"stop_detail,omitempty"`
	// OutputBytes is Result.Usage.OutputBytes: the output kept.
	OutputBytes int64 `json:"output_bytes,omitempty"`
	// Usage: the result reports the memory and CPU time the run used.
	Usage bool   `json:"usage,omitempty"`
	Error string `json:"error,omitempty"` // the error kind
	// ErrorMatch is a regular expression the error message must match.
	ErrorMatch string `json:"error_match,omitempty"`
	// Stdout is the exact standard output; StdoutMatch a regular
	// expression it must match; StdoutMax a bound on its length.
	Stdout      *string `json:"stdout,omitempty"`
	StdoutMatch string  `json:"stdout_match,omitempty"`
	StdoutMax   int     `json:"stdout_max,omitempty"`
	// StderrMatch is a regular expression the standard error must match.
	StderrMatch string `json:"stderr_match,omitempty"`
	// Clock: the result records the job's pinned clock.
	Clock bool `json:"clock,omitempty"`
	// Files are the collected files exactly (on the wire as Job.Files);
	// FilesSkipped what was left out, exactly.
	Files        map[string]string `json:"files,omitempty"`
	FilesSkipped []string          `json:"files_skipped,omitempty"`
}

// UnmarshalJSON decodes an outcome, its files as Job.Files are (any
// bytes: {"base64": ...} where not UTF-8).
func (w *outcome) UnmarshalJSON(data []byte) error {
	type plain outcome
	var o struct {
		plain
		Files json.RawMessage `json:"files,omitempty"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&o); err != nil {
		return err
	}
	*w = outcome(o.plain)
	if o.Files != nil {
		job, err := airlock.DecodeJob([]byte(`{"kind":"command","argv":["true"],"files":` + string(o.Files) + `}`))
		if err != nil {
			return err
		}
		w.Files = job.Files
	}
	return nil
}

// loadCases reads and checks the table: names unique, every job valid in
// the wire format, every expected outcome well formed.
func loadCases(t *testing.T) []contractCase {
	t.Helper()
	data, err := os.ReadFile("testdata/cases.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	var cases []contractCase
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		var c contractCase
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil {
			t.Fatalf("cases.jsonl:%d: %v", n, err)
		}
		switch {
		case c.Name == "" || c.Contract == "":
			t.Fatalf("cases.jsonl:%d: a case needs a name and the contract it checks", n)
		case seen[c.Name]:
			t.Fatalf("cases.jsonl:%d: case %q twice", n, c.Name)
		}
		for tier, why := range c.Gaps {
			if !slices.ContainsFunc(osTiers, func(o osTier) bool { return o.of == "" && o.name == tier }) || why == "" {
				t.Fatalf("cases.jsonl:%d (%s): a gap names a tier of the suite and its reason", n, c.Name)
			}
		}
		seen[c.Name] = true
		if c.Then != nil {
			if !c.Session {
				t.Fatalf("cases.jsonl:%d (%s): then needs a session", n, c.Name)
			}
			if _, err := airlock.DecodeJob(c.Then.Job); err != nil {
				t.Fatalf("cases.jsonl:%d (%s): then: %v", n, c.Name, err)
			}
		}
		job, err := airlock.DecodeJob(c.Job)
		if err != nil {
			t.Fatalf("cases.jsonl:%d (%s): %v", n, c.Name, err)
		}
		if job.Kind != airlock.KindCommand || job.Image == "" {
			t.Fatalf("cases.jsonl:%d (%s): a contract case is a command job naming its image", n, c.Name)
		}
		for tier, w := range c.On {
			if !slices.ContainsFunc(osTiers, func(o osTier) bool { return o.of == "" && o.name == tier }) {
				t.Fatalf("cases.jsonl:%d (%s): on names %q, not a tier of the suite", n, c.Name, tier)
			}
			for _, re := range []string{w.ErrorMatch, w.StdoutMatch, w.StderrMatch, w.StopDetail} {
				if _, err := regexp.Compile(re); err != nil {
					t.Fatalf("cases.jsonl:%d (%s): %v", n, c.Name, err)
				}
			}
		}
		for _, re := range []string{c.Want.ErrorMatch, c.Want.StdoutMatch, c.Want.StderrMatch, c.Want.StopDetail} {
			if _, err := regexp.Compile(re); err != nil {
				t.Fatalf("cases.jsonl:%d (%s): %v", n, c.Name, err)
			}
		}
		cases = append(cases, c)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(cases) == 0 {
		t.Fatal("cases.jsonl holds no case")
	}
	return cases
}

// check compares a run's result and error with the case's outcome and
// returns every difference.
func (w outcome) check(job airlock.Job, res airlock.Result, err error) []string {
	var bad []string
	stop, stopped := airlock.AsStop(err)
	switch {
	case w.Stopped != "" && (!stopped || string(stop.Reason) != w.Stopped):
		bad = append(bad, fmt.Sprintf("want stopped: %s, got error %v", w.Stopped, err))
	case w.Stopped != "" && (res.Stopped == nil || string(res.Stopped.Reason) != w.Stopped):
		bad = append(bad, fmt.Sprintf("want Result.Stopped %s, got %+v", w.Stopped, res.Stopped))
	case w.StopDetail != "" && !regexp.MustCompile(w.StopDetail).MatchString(stop.Detail):
		bad = append(bad, fmt.Sprintf("stop detail %q does not match %q", stop.Detail, w.StopDetail))
	case w.Error != "" && (err == nil || stopped || string(airlock.KindOf(err)) != w.Error):
		bad = append(bad, fmt.Sprintf("want a %s error, got %v", w.Error, err))
	case w.Error != "" && w.ErrorMatch != "" && !regexp.MustCompile(w.ErrorMatch).MatchString(err.Error()):
		bad = append(bad, fmt.Sprintf("error %q does not match %q", err, w.ErrorMatch))
	case w.Stopped == "" && w.Error == "" && err != nil:
		bad = append(bad, fmt.Sprintf("want no error, got %v", err))
	}
	if w.Exit != nil && res.ExitCode != *w.Exit {
		bad = append(bad, fmt.Sprintf("exit code %d, want %d", res.ExitCode, *w.Exit))
	}
	if w.OutputBytes != 0 && res.Usage.OutputBytes != w.OutputBytes {
		bad = append(bad, fmt.Sprintf("usage.output_bytes %d, want %d", res.Usage.OutputBytes, w.OutputBytes))
	}
	if w.Usage && (res.Usage.MemoryBytes <= 0 || res.Usage.CPUUS <= 0) {
		bad = append(bad, fmt.Sprintf("usage %+v reports no memory or CPU time", res.Usage))
	}
	if w.Stdout != nil && res.Stdout != *w.Stdout {
		bad = append(bad, fmt.Sprintf("stdout %q, want %q", res.Stdout, *w.Stdout))
	}
	if w.StdoutMatch != "" && !regexp.MustCompile(w.StdoutMatch).MatchString(res.Stdout) {
		bad = append(bad, fmt.Sprintf("stdout %q does not match %q", res.Stdout, w.StdoutMatch))
	}
	if w.StderrMatch != "" && !regexp.MustCompile(w.StderrMatch).MatchString(res.Stderr) {
		bad = append(bad, fmt.Sprintf("stderr %q does not match %q", res.Stderr, w.StderrMatch))
	}
	if w.StdoutMax > 0 && len(res.Stdout) > w.StdoutMax {
		bad = append(bad, fmt.Sprintf("stdout is %d bytes, over %d", len(res.Stdout), w.StdoutMax))
	}
	if w.Files != nil && !maps.Equal(res.Files, w.Files) {
		bad = append(bad, fmt.Sprintf("collected files %q, want %q", res.Files, w.Files))
	}
	if w.FilesSkipped != nil && !slices.Equal(res.FilesSkipped, w.FilesSkipped) {
		bad = append(bad, fmt.Sprintf("files skipped %q, want %q", res.FilesSkipped, w.FilesSkipped))
	}
	if w.Clock && !res.Clock.Equal(job.Clock) {
		bad = append(bad, fmt.Sprintf("Result.Clock %v, want the job's %v", res.Clock, job.Clock))
	}
	return bad
}

// TestContract runs every case on every OS tier. Each tier gives the
// outcome the table states, so all three give the same; a tier whose
// backend is missing skips (fails under CI), as does the suite when the
// catalogue's images have not been built.
func TestContract(t *testing.T) {
	cases := loadCases(t)
	for _, ot := range osTiers {
		t.Run(ot.name, func(t *testing.T) {
			s := store(t)
			needImage(t, s, "minimal")
			tr := tier(t, ot, s)
			for _, c := range cases {
				t.Run(c.Name, func(t *testing.T) {
					job, _ := airlock.DecodeJob(c.Job)
					if job.Image != image.Host {
						needImage(t, s, job.Image)
					}
					var (
						res airlock.Result
						err error
					)
					var next []runResult
					if c.Session {
						jobs := []airlock.Job{job}
						if c.Then != nil {
							then, _ := airlock.DecodeJob(c.Then.Job)
							jobs = append(jobs, then)
						}
						rs, ok := runInSession(t, tr, jobs...)
						if !ok {
							return // refused, as a tier without sessions must
						}
						res, err, next = rs[0].res, rs[0].err, rs[1:]
					} else {
						res, err = run(tr, job)
					}
					want := c.Want
					if w, ok := c.On[ot.tier()]; ok {
						want = w
					}
					bad := want.check(job, res, err)
					bad = append(bad, fields(tr, res, err)...)
					for _, r := range next {
						then, _ := airlock.DecodeJob(c.Then.Job)
						for _, b := range c.Then.Want.check(then, r.res, r.err) {
							bad = append(bad, "then: "+b)
						}
					}
					if gap, ok := c.Gaps[ot.tier()]; ok {
						if len(bad) == 0 {
							t.Errorf("%s: the stated gap (%s) is closed on %s: remove it from the case and SECURITY.md", c.Contract, gap, ot.name)
						} else {
							t.Logf("stated gap on %s: %s (%s)", ot.name, gap, strings.Join(bad, "; "))
						}
						return
					}
					if len(bad) > 0 {
						t.Errorf("%s\n%s\nstdout: %q\nstderr: %q", c.Contract, strings.Join(bad, "\n"), res.Stdout, res.Stderr)
					}
				})
			}
		})
	}
}

// fields checks what every result carries, whatever the case: the tier
// and level that ran it, the clock and seed it ran with, and for a run
// that ended by itself or by a stop, timings that add up.
func fields(tr airlock.Tier, res airlock.Result, err error) []string {
	var bad []string
	if res.Tier != tr.Name() || res.Level != tr.Level() {
		bad = append(bad, fmt.Sprintf("result names tier %q level %d, want %q level %d", res.Tier, res.Level, tr.Name(), tr.Level()))
	}
	if _, stopped := airlock.AsStop(err); err != nil && !stopped {
		return bad
	}
	if res.Clock.IsZero() || res.Seed == 0 {
		bad = append(bad, fmt.Sprintf("result records clock %v and seed %d, want both", res.Clock, res.Seed))
	}
	if t := res.Timings; t.StartUS <= 0 || t.RunUS <= 0 || t.TotalUS < t.StartUS+t.RunUS {
		bad = append(bad, fmt.Sprintf("timings %+v: want a start and a run, within the total", t))
	}
	return bad
}

// TestBinaryStdin: stdin is any bytes on every tier, however the tier
// starts the program (a scratch size sends gVisor's job through its
// agent). The table cannot hold such a job: its stdin is a JSON string.
func TestBinaryStdin(t *testing.T) {
	var in strings.Builder
	for i := range 256 {
		in.WriteByte(byte(i))
	}
	want := fmt.Sprintf("%d %x\n", in.Len(), sha256.Sum256([]byte(in.String())))
	for _, ot := range osTiers {
		t.Run(ot.name, func(t *testing.T) {
			s := store(t)
			needImage(t, s, "python")
			tr := tier(t, ot, s)
			for _, mb := range []int64{0, 16} {
				job := airlock.Job{Kind: airlock.KindCommand, Image: "python", Stdin: in.String(),
					Argv:   []string{"python3", "-c", "import hashlib, sys\nd = sys.stdin.buffer.read()\nprint(len(d), hashlib.sha256(d).hexdigest())"},
					Grants: airlock.Grants{FS: airlock.FSGrant{ScratchMB: mb}}, Limits: airlock.Limits{WallMS: 60000}}
				res, err := run(tr, job)
				if err != nil || res.Stdout != want {
					t.Errorf("scratch_mb %d: %v: stdout %q, want %q (stderr %q)", mb, err, res.Stdout, want, res.Stderr)
				}
			}
		})
	}
}
