// Package runner runs the corpus (corpus/*.jsonl) against every tier each
// case applies to, each case in its own bounded child process so that a
// crash or a hang cannot take the runner down, with canaries planted: a
// secret in the environment, a secret file, and an HTTP sink and a DNS
// resolver on loopback that count hits. A case escapes when its outcome is
// not one its expectation lists, when a canary's secret appears in its
// result, when a sink saw its token, or when its child died or hung.
// Areas whose cases are not jobs (egress requests, output documents) run
// as suites against the pseudo-tier they are written for (see [Suite]);
// approval cases run through the approval gate (corpus.Case.Exec).
// `airlock corpus` is its command line.
package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/corpus"
	"github.com/airlock-sandbox/airlock/internal/deathsig"
	"github.com/airlock-sandbox/airlock/internal/jobs"
	"github.com/airlock-sandbox/airlock/internal/value"
)

// Schema names the report's JSON format.
const Schema = "airlock-corpus/v1"

// Config configures a run. It is immutable: With methods return copies.
type Config struct {
	sources  []TierSource
	cases    []corpus.Case
	areas    []string
	ids      []string
	tiers    []string
	exe      string
	args     []string
	timeout  time.Duration
	memoryMB int64
	parallel int
	modules  ModuleSource
	progress func(done, total int, v Verdict)
	suites   []Suite
}

// TierSource is a tier the runner runs cases on: its name, and how to
// build a fresh instance of it. The runner builds one to probe it, and
// each child builds its own for its case.
type TierSource struct {
	Name string
	New  func() (airlock.Tier, error)
}

// NewConfig runs the tiers of sources against every case of the embedded
// corpus, re-executing this program with args (the child must call Child
// with the same sources when IsChild is true), two children at a time,
// each with 60 s and, for in-process tiers, 8 GiB of address space (the
// Go runtime alone reserves several GiB: 4 GiB makes ordinary children
// fail). The server cases need a [ServerSource] among them.
func NewConfig(sources []TierSource, args ...string) Config {
	return Config{sources: slices.Clone(sources), args: args, timeout: 60 * time.Second, memoryMB: 8192, parallel: 2, suites: DefaultSuites()}
}

// WithSuites sets the suites to run (default: [DefaultSuites]). The child
// must be given those that are not defaults.
func (c Config) WithSuites(s ...Suite) Config { c.suites = slices.Clone(s); return c }

// WithCases replaces the embedded corpus with these cases.
func (c Config) WithCases(cases ...corpus.Case) Config { c.cases = slices.Clone(cases); return c }

// WithAreas restricts the run to some areas.
func (c Config) WithAreas(areas ...string) Config { c.areas = slices.Clone(areas); return c }

// WithCaseIDs restricts the run to the cases with these ids.
func (c Config) WithCaseIDs(ids ...string) Config { c.ids = slices.Clone(ids); return c }

// WithTiers restricts the run to some tiers.
func (c Config) WithTiers(names ...string) Config { c.tiers = slices.Clone(names); return c }

// WithExecutable sets the program to re-execute (default: this one).
func (c Config) WithExecutable(path string) Config { c.exe = path; return c }

// WithTimeout bounds each child's wall clock; a child still running then is
// killed, which counts as an escape for an attack case (the host hung).
func (c Config) WithTimeout(d time.Duration) Config { c.timeout = d; return c }

// WithMemoryMB sets the address-space limit of children running in-process
// tiers (0: none).
func (c Config) WithMemoryMB(n int64) Config { c.memoryMB = n; return c }

// WithParallel sets how many children run at once.
func (c Config) WithParallel(n int) Config { c.parallel = n; return c }

// WithModules sets where WASM cases get their modules from.
func (c Config) WithModules(m ModuleSource) Config { c.modules = m; return c }

// WithProgress sets a function called after each case.
func (c Config) WithProgress(f func(done, total int, v Verdict)) Config { c.progress = f; return c }

// ModuleSource returns the file holding the WASM module for a case, or an
// error saying why there is none (the case is then skipped with it).
type ModuleSource func(c *corpus.Case) (string, error)

// Verdict is one case on one tier.
type Verdict struct {
	corpus.Verdict
	// Result is escaped, contained, benign-passed, benign-blocked or skipped.
	Result   string   `json:"result"`
	Evidence []string `json:"evidence,omitempty"`
	Millis   int64    `json:"ms"`
}

// The results of a verdict.
const (
	Contained     = "contained"
	Escaped       = "escaped"
	BenignPassed  = "benign-passed"
	BenignBlocked = "benign-blocked"
	SkippedCase   = "skipped"
)

// Report is what a run found.
type Report struct {
	Schema    string      `json:"schema"`
	Started   time.Time   `json:"started"`
	Seconds   float64     `json:"seconds"`
	Tiers     []TierInfo  `json:"tiers"`
	Counts    []Count     `json:"counts"`
	Verdicts  []Verdict   `json:"verdicts"`
	Uncovered []Uncovered `json:"not_covered,omitempty"`
}

// TierInfo says whether a tier could run here.
type TierInfo struct {
	Name      string `json:"name"`
	Level     int    `json:"level"`
	Available bool   `json:"available"`
	Reason    string `json:"reason,omitempty"`
	// Pseudo marks what is not a tier but what an area's cases are
	// written for: the egress gateway, the output sanitiser.
	Pseudo bool `json:"pseudo,omitempty"`
}

// Count sums the verdicts of one tier and area.
type Count struct {
	Tier          string `json:"tier"`
	Area          string `json:"area"`
	Contained     int    `json:"contained"`
	Escaped       int    `json:"escaped"`
	BenignPassed  int    `json:"benign_passed"`
	BenignBlocked int    `json:"benign_blocked"`
	Skipped       int    `json:"skipped"`
	SkipReason    string `json:"skip_reason,omitempty"`
}

// Uncovered names cases this runner does not run, and where they are run.
type Uncovered struct {
	Area string `json:"area"`
	Why  string `json:"why"`
}

// Failed reports whether any case escaped or any benign case was blocked.
func (r *Report) Failed() bool {
	for _, c := range r.Counts {
		if c.Escaped > 0 || c.BenignBlocked > 0 {
			return true
		}
	}
	return false
}

// Run plants the canaries and runs every selected case on every tier it
// applies to.
func Run(ctx context.Context, c Config) (*Report, error) {
	if c.timeout <= 0 || c.parallel < 1 || c.memoryMB < 0 {
		return nil, jobs.Invalid("", "timeout and parallel must be positive, memory not negative")
	}
	if c.exe == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("finding this program to re-execute: %w", err)
		}
		c.exe = exe
	}
	if err := c.knownAreas(); err != nil {
		return nil, err
	}
	cases := c.cases
	if cases == nil {
		var err error
		if cases, err = corpus.Load(c.areas...); err != nil {
			return nil, fmt.Errorf("loading the corpus: %w", err)
		}
	} else if len(c.areas) > 0 {
		cases = slices.DeleteFunc(slices.Clone(cases), func(k corpus.Case) bool { return !slices.Contains(c.areas, k.Area) })
	}
	rep := &Report{Schema: Schema, Started: time.Now().UTC()}
	tiers, err := c.probe(rep)
	if err != nil {
		return nil, err
	}
	suites, err := c.suiteTasks(rep)
	if err != nil {
		return nil, err
	}
	if len(c.ids) > 0 {
		cases = slices.DeleteFunc(slices.Clone(cases), func(k corpus.Case) bool { return !slices.Contains(c.ids, k.ID) })
		suites = slices.DeleteFunc(suites, func(t task) bool { return !slices.Contains(c.ids, t.sc.ID) })
		if len(cases)+len(suites) == 0 {
			return nil, jobs.Invalid("cases", "no case has any of the ids %v", c.ids)
		}
	}
	can, err := plant()
	if err != nil {
		return nil, fmt.Errorf("planting the canaries: %w", err)
	}
	defer can.close()
	if err := can.grantDir(); err != nil {
		return nil, fmt.Errorf("planting the canaries: %w", err)
	}

	var tasks []task
	for _, t := range tiers {
		for i := range cases {
			if applies(&cases[i], t) {
				tasks = append(tasks, task{tier: t, c: &cases[i]})
			}
		}
	}
	tasks = append(tasks, suites...)
	verdicts := make([]Verdict, len(tasks))
	var (
		mu   sync.Mutex
		done int
		wg   sync.WaitGroup
		sem  = make(chan struct{}, c.parallel)
	)
	for i, tk := range tasks {
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			v := c.one(ctx, can, tk, fmt.Sprintf("t%04d", i))
			mu.Lock()
			verdicts[i] = v
			done++
			if c.progress != nil {
				c.progress(done, len(tasks), v)
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rep.Verdicts = verdicts
	rep.Counts = count(rep.Tiers, verdicts)
	rep.Uncovered = idle(cases, verdicts)
	rep.Seconds = float64(time.Since(rep.Started).Milliseconds()) / 1000
	return rep, nil
}

// probed is a tier as the parent saw it: its name, level, the kinds it
// runs and, when it cannot run here, why.
type probed struct {
	name  string
	level airlock.Level
	kinds map[airlock.Kind]bool
	down  error
}

// task is one case on one tier, or one case of a suite.
// knownAreas refuses an area that no case and no suite is in: a run of
// none of the corpus would otherwise report nothing escaped.
func (c Config) knownAreas() error {
	if len(c.areas) == 0 {
		return nil
	}
	all := c.cases
	if all == nil {
		var err error
		if all, err = corpus.Load(); err != nil {
			return fmt.Errorf("loading the corpus: %w", err)
		}
	}
	known := map[string]bool{}
	for _, k := range all {
		known[k.Area] = true
	}
	for _, s := range c.suites {
		known[s.Area] = true
	}
	for _, a := range c.areas {
		if !known[a] {
			return jobs.Invalid("areas", "no case is in area %q (the areas: %s)", a, strings.Join(slices.Sorted(maps.Keys(known)), ", "))
		}
	}
	return nil
}

type task struct {
	tier  probed
	c     *corpus.Case
	suite *Suite
	sc    SuiteCase
}

// suiteTasks lists the cases of the suites whose area and pseudo-tier are
// selected, and adds the pseudo-tiers to the report.
func (c Config) suiteTasks(rep *Report) ([]task, error) {
	var out []task
	for i := range c.suites {
		s := &c.suites[i]
		if (len(c.areas) > 0 && !slices.Contains(c.areas, s.Area)) || (len(c.tiers) > 0 && !slices.Contains(c.tiers, s.Name)) {
			continue
		}
		cases, err := s.Cases()
		if err != nil {
			return nil, fmt.Errorf("loading the %s cases: %w", s.Area, err)
		}
		rep.Tiers = append(rep.Tiers, TierInfo{Name: s.Name, Available: true, Pseudo: true})
		for _, k := range cases {
			out = append(out, task{suite: s, sc: k})
		}
	}
	return out, nil
}

// probeJobs are minimal jobs of each kind, used to ask a tier which kinds
// it runs.
var probeJobs = []airlock.Job{
	{Kind: airlock.KindExpr, Code: "1"},
	{Kind: airlock.KindStarlark, Code: "x = 1"},
	{Kind: airlock.KindWasm, Module: []byte("\x00asm\x01\x00\x00\x00")},
	{Kind: airlock.KindCommand, Argv: []string{"/bin/true"}},
}

func (c Config) probe(rep *Report) ([]probed, error) {
	names := map[string]bool{}
	for _, s := range c.suites {
		names[s.Name] = true
	}
	var out []probed
	for _, f := range c.sources {
		names[f.Name] = true
		if len(c.tiers) > 0 && !slices.Contains(c.tiers, f.Name) {
			continue
		}
		t, err := f.New()
		if err != nil {
			return nil, fmt.Errorf("building tier %s: %w", f.Name, err)
		}
		p := probed{name: f.Name, level: t.Level(), kinds: map[airlock.Kind]bool{}}
		if pr, ok := t.(airlock.Prober); ok {
			p.down = pr.Available()
		}
		// A pseudo-tier runs only the cases that name it.
		for _, j := range probeJobs {
			if !isServer(t) && t.Admit(j) == nil {
				p.kinds[j.Kind] = true
			}
		}
		closeTier(t)
		info := TierInfo{Name: p.name, Level: int(p.level), Available: p.down == nil, Pseudo: isServer(t)}
		if p.down != nil {
			info.Reason = p.down.Error()
		}
		rep.Tiers = append(rep.Tiers, info)
		out = append(out, p)
	}
	for _, n := range c.tiers {
		if !names[n] {
			return nil, jobs.Invalid("tiers", "unknown tier %q", n)
		}
	}
	return out, nil
}

// applies: a case names its tiers, or else applies to every tier that
// runs its kind.
func applies(c *corpus.Case, t probed) bool {
	if len(c.Tiers) > 0 {
		return c.Applies(t.name)
	}
	var k struct {
		Kind airlock.Kind `json:"kind"`
	}
	_ = json.Unmarshal(c.Job, &k)
	return t.kinds[k.Kind]
}

// one runs a case in a child and judges it.
func (c Config) one(ctx context.Context, can *canaries, tk task, token string) (v Verdict) {
	start := time.Now()
	defer func() { v.Millis = time.Since(start).Milliseconds() }()
	if tk.suite != nil {
		v = Verdict{Verdict: corpus.Verdict{Case: tk.sc.ID, Area: tk.suite.Area, Class: tk.sc.Class, Tier: tk.suite.Name}}
		s := spec{Suite: tk.suite.Name, Raw: tk.sc.Raw, Vars: can.vars(token), WallMS: c.timeout.Milliseconds()}
		return c.judge(ctx, can, s, token, v)
	}
	t, k := tk.tier, tk.c
	v = Verdict{Verdict: corpus.Verdict{Case: k.ID, Area: k.Area, Class: k.Class, Tier: t.name}}
	skip := func(why string) Verdict {
		v.Result, v.Detail, v.Outcome = SkippedCase, why, "skipped"
		return v
	}
	if t.down != nil {
		return skip("tier unavailable: " + t.down.Error())
	}
	s := spec{Tier: t.name, Case: k, Vars: can.vars(token), MemoryMB: c.memoryMB, WallMS: c.timeout.Milliseconds()}
	if why := k.SkipReason(s.Vars); why != "" {
		return skip(why)
	}
	if k.Area == "wasm" || strings.Contains(string(k.Job), `"wasm"`) {
		job, err := k.BuildJob(nil)
		if err == nil && job.Kind == airlock.KindWasm && len(job.Module) == 0 {
			if c.modules == nil {
				return skip("no module source for WASM cases (needs the source tree, wat2wasm and the Go toolchain)")
			}
			if s.Module, err = c.modules(k); err != nil {
				return skip(err.Error())
			}
		}
	}
	return c.judge(ctx, can, s, token, v)
}

// judge runs the spec in a child and judges what came back: a dead or
// hung child, a leaked secret or a canary hit is an escape whatever the
// case expected.
func (c Config) judge(ctx context.Context, can *canaries, s spec, token string, v Verdict) Verdict {
	rp, stderr, runErr := c.spawn(ctx, s)
	hits := can.taken(token)
	class := v.Class
	if runErr != nil {
		v.Outcome = "died"
		v.Detail = "the host did not survive: " + runErr.Error()
		v.Evidence = append([]string{v.Detail}, tail(stderr)...)
		v.Evidence = append(v.Evidence, hits...)
		v.Result = Escaped
		if class == corpus.Benign {
			v.Result = BenignBlocked
		}
		return v
	}
	if j := rp.Judgement; j != nil {
		v.Outcome, v.Pass, v.Detail, v.Evidence = j.Outcome, j.Pass, j.Detail, j.Evidence
		if leaks := can.leaked(airlock.Result{Stdout: j.Detail, Stderr: strings.Join(j.Evidence, "\n")}); len(leaks) > 0 {
			v.Pass = false
			v.Evidence = append(v.Evidence, leaks...)
		}
	} else {
		tier := v.Tier
		v.Verdict = s.Case.Judge(rp.Result, rp.Result.Err(), can.secrets()...)
		v.Tier = tier
		if leaks := can.leaked(rp.Result); len(leaks) > 0 {
			v.Pass = false
			v.Evidence = append(v.Evidence, leaks...)
		}
		if !v.Pass {
			// What the job printed shows what it got to do.
			for name, out := range map[string]string{"stdout": rp.Result.Stdout, "stderr": rp.Result.Stderr} {
				if out != "" {
					v.Evidence = append(v.Evidence, fmt.Sprintf("%s %q", name, value.Clip(out, 200)))
				}
			}
			slices.Sort(v.Evidence)
		}
	}
	if len(hits) > 0 {
		v.Pass = false
		v.Detail = "a canary sink was reached"
		v.Evidence = append(v.Evidence, hits...)
	}
	switch {
	case v.Pass && class == corpus.Attack:
		v.Result = Contained
	case v.Pass:
		v.Result = BenignPassed
	case class == corpus.Attack:
		v.Result = Escaped
		if len(v.Evidence) == 0 {
			v.Evidence = []string{v.Detail}
		}
	default:
		v.Result = BenignBlocked
		v.Evidence = append(v.Evidence, v.Detail)
	}
	return v
}

// spawn runs one child on the spec: in its own process group, killed with
// it at the deadline, its output capped. An error means the child did not
// report (it crashed, hung or wrote no result); stderr is its last words.
func (c Config) spawn(ctx context.Context, s spec) (rp reply, stderr string, err error) {
	in, err := json.Marshal(s)
	if err != nil {
		return rp, "", fmt.Errorf("encoding the case: %w", err)
	}
	// The child gets the wall limit plus slack to start, build the tier and
	// report; the tier itself must stop the job within the case's limits.
	cctx, cancel := context.WithTimeout(ctx, c.timeout+10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, c.exe, c.args...)
	cmd.Env = append(os.Environ(), ChildEnv+"=1")
	cmd.Stdin = bytes.NewReader(in)
	var out, errb capped
	out.max, errb.max = 16<<20, 64<<10
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var wait func() error
	if wait, err = deathsig.Start(cmd); err == nil {
		err = wait()
	}
	// Whatever the child started in its process group goes with it.
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	if err == nil {
		if err = json.Unmarshal(out.Bytes(), &rp); err != nil {
			err = fmt.Errorf("child wrote no result: %w", err)
		}
	}
	if err != nil && errors.Is(cctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("child still running after %v: killed", c.timeout+10*time.Second)
	}
	return rp, errb.String(), err
}

// tail returns the last lines of a child's stderr, as evidence.
func tail(s string) []string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > 6 {
		lines = lines[:6] // the first lines of a Go crash say what it was
	}
	if len(lines) == 1 && lines[0] == "" {
		return nil
	}
	return lines
}

// capped is a buffer that keeps at most max bytes.
type capped struct {
	bytes.Buffer
	max int
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.Len(); room > 0 {
		c.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// count sums the verdicts per tier (in the report's order) and area.
func count(tiers []TierInfo, vs []Verdict) []Count {
	areas := []string{}
	for _, v := range vs {
		if !slices.Contains(areas, v.Area) {
			areas = append(areas, v.Area)
		}
	}
	slices.Sort(areas)
	var out []Count
	for _, t := range tiers {
		for _, a := range areas {
			n := Count{Tier: t.Name, Area: a}
			seen := false
			for _, v := range vs {
				if v.Tier != t.Name || v.Area != a {
					continue
				}
				seen = true
				switch v.Result {
				case Contained:
					n.Contained++
				case Escaped:
					n.Escaped++
				case BenignPassed:
					n.BenignPassed++
				case BenignBlocked:
					n.BenignBlocked++
				default:
					n.Skipped++
					if n.SkipReason == "" {
						n.SkipReason = v.Detail
					}
				}
			}
			if seen {
				out = append(out, n)
			}
		}
	}
	return out
}

// idle lists the areas none of whose cases ran on any tier here.
func idle(cases []corpus.Case, vs []Verdict) []Uncovered {
	ran := map[string]bool{}
	for _, v := range vs {
		ran[v.Area] = true
	}
	var out []Uncovered
	for _, k := range cases {
		if !ran[k.Area] {
			ran[k.Area] = true
			out = append(out, Uncovered{Area: k.Area, Why: "no selected tier runs its cases (none registered admits their kind, or the cases name other tiers)"})
		}
	}
	return out
}

func closeTier(t airlock.Tier) {
	if c, ok := t.(io.Closer); ok {
		_ = c.Close()
	}
}
