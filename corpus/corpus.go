// Package corpus holds airlock's attack and benign cases as data, and the
// code that runs them against a tier and judges the outcome.
//
// Each area has a JSON Lines file (expr.jsonl, starlark.jsonl, ...), one
// case per line; see README.md in this folder for the format. The files are
// embedded, so the tests and `airlock corpus` run the same cases.
package corpus

import (
	"bufio"
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/value"
)

//go:embed *.jsonl
var files embed.FS

// Class says whether a case attacks the sandbox or is ordinary work that
// must keep working.
type Class string

// The classes.
const (
	Attack Class = "attack"
	Benign Class = "benign"
)

// Case is one corpus entry.
type Case struct {
	ID        string            `json:"id"`
	Area      string            `json:"area"`
	Class     Class             `json:"class"`
	Tiers     []string          `json:"tiers,omitempty"`
	Job       json.RawMessage   `json:"job"`
	Expand    map[string]Repeat `json:"expand,omitempty"`
	Expect    Expect            `json:"expect"`
	Rationale string            `json:"rationale"`
	Source    string            `json:"source"`
	Skip      string            `json:"skip,omitempty"`
	// Approval makes the case an approval case (see [Approval]).
	Approval *Approval `json:"approval,omitempty"`
	// Before lists jobs run first, in order, in one session of the tier
	// that the case's job then runs in too (see [Case.Exec]): what an
	// earlier job of a conversation leaves in the scratch.
	Before []json.RawMessage `json:"before,omitempty"`
}

// Repeat expands ${NAME} in the job's strings to Text repeated Times times.
type Repeat struct {
	Text  string `json:"repeat"`
	Times int    `json:"times"`
}

// Expect is what a case must produce.
type Expect struct {
	// AnyOf lists acceptable outcomes (see [Outcome]); empty means "ok".
	AnyOf []string `json:"any_of,omitempty"`
	// Value, when present, must equal the result's value (as JSON).
	Value json.RawMessage `json:"value,omitempty"`
	// Stdout, when present, must equal the result's stdout.
	Stdout *string `json:"stdout,omitempty"`
	// Contains lists strings stdout+stderr must contain.
	Contains []string `json:"contains,omitempty"`
	// NotContains lists strings no output or value may contain.
	NotContains []string `json:"not_contains,omitempty"`
}

// Load returns every case of the given areas (all areas when none are
// named), in file order.
func Load(areas ...string) ([]Case, error) {
	names, err := fs.Glob(files, "*.jsonl")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	want := map[string]bool{}
	for _, a := range areas {
		want[a] = true
	}
	var out []Case
	seen := map[string]bool{}
	for _, name := range names {
		area := strings.TrimSuffix(path.Base(name), ".jsonl")
		if len(want) > 0 && !want[area] {
			continue
		}
		data, err := files.ReadFile(name)
		if err != nil {
			return nil, err
		}
		cases, err := Parse(area, data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		for _, c := range cases {
			if seen[c.ID] {
				return nil, fmt.Errorf("%s: duplicate case id %q", name, c.ID)
			}
			seen[c.ID] = true
		}
		out = append(out, cases...)
	}
	return out, nil
}

// Areas lists the areas that have case files.
func Areas() []string {
	names, _ := fs.Glob(files, "*.jsonl")
	out := make([]string, 0, len(names))
	for _, n := range names {
		out = append(out, strings.TrimSuffix(n, ".jsonl"))
	}
	sort.Strings(out)
	return out
}

// Parse reads cases in the JSON Lines format; blank lines and lines
// starting with '#' or '//' are ignored.
func Parse(area string, data []byte) ([]Case, error) {
	var out []Case
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || line[0] == '#' || bytes.HasPrefix(line, []byte("//")) {
			continue
		}
		var c Case
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		if c.Area == "" {
			c.Area = area
		}
		if err := c.validate(); err != nil {
			return nil, fmt.Errorf("line %d (%s): %w", n, c.ID, err)
		}
		out = append(out, c)
	}
	return out, sc.Err()
}

func (c *Case) validate() error {
	switch {
	case c.ID == "":
		return fmt.Errorf("case has no id")
	case c.Class != Attack && c.Class != Benign:
		return fmt.Errorf("class must be attack or benign, not %q", c.Class)
	case c.Rationale == "" || c.Source == "":
		return fmt.Errorf("every case needs a rationale and a source (an advisory, issue or write-up, or \"derived\")")
	case c.Class == Attack && len(c.Expect.AnyOf) == 0:
		return fmt.Errorf("an attack case must list the outcomes that count as contained")
	}
	for name, r := range c.Expand {
		if r.Times < 0 || r.Times > 50_000_000 {
			return fmt.Errorf("expand %s: times %d out of range", name, r.Times)
		}
	}
	if c.Area == "approval" && c.Approval == nil {
		return fmt.Errorf("an approval case needs an approval section")
	}
	if c.Approval != nil {
		if err := c.Approval.validate(); err != nil {
			return err
		}
	}
	for i, raw := range c.Before {
		if _, err := c.buildJob(raw, nil); err != nil {
			return fmt.Errorf("before[%d]: %w", i, err)
		}
	}
	_, err := c.BuildJob(nil)
	return err
}

// BuildJob decodes the case's job and expands ${NAME} placeholders in its
// code, argv, stdin, entry and files: the case's own expansions, then vars
// (the runner's canaries, such as CANARY_FILE).
func (c *Case) BuildJob(vars map[string]string) (airlock.Job, error) {
	return c.buildJob(c.Job, vars)
}

// buildJob is BuildJob for the job raw (the case's, or one it runs
// before it).
func (c *Case) buildJob(raw json.RawMessage, vars map[string]string) (airlock.Job, error) {
	job, err := airlock.DecodeJob(raw)
	if err != nil {
		return job, err
	}
	repl := make([]string, 0, 2*(len(c.Expand)+len(vars)))
	for name, r := range c.Expand {
		repl = append(repl, "${"+name+"}", strings.Repeat(r.Text, r.Times))
	}
	for name, v := range vars {
		repl = append(repl, "${"+name+"}", v)
	}
	if len(repl) == 0 {
		return job, nil
	}
	r := strings.NewReplacer(repl...)
	job.Code = r.Replace(job.Code)
	job.Stdin = r.Replace(job.Stdin)
	job.Entry = r.Replace(job.Entry)
	for i, a := range job.Argv {
		job.Argv[i] = r.Replace(a)
	}
	for k, v := range job.Files {
		job.Files[k] = r.Replace(v)
	}
	return job, nil
}

// SkipReason says why the case cannot run with vars — its own skip, or a
// ${VAR} that neither its expansions nor vars provide — or returns "".
func (c *Case) SkipReason(vars map[string]string) string {
	if c.Skip != "" {
		return c.Skip
	}
	if v := c.MissingVar(vars); v != "" {
		return "nothing here provides ${" + v + "}"
	}
	return ""
}

// MissingVar names a ${VAR} in the case's job that neither its own
// expansions nor vars provide, or returns "". Runners skip such a case
// with the reason instead of running it with the placeholder in place.
func (c *Case) MissingVar(vars map[string]string) string {
	raw := string(c.Job)
	for _, b := range c.Before {
		raw += "\x00" + string(b)
	}
	for {
		i := strings.Index(raw, "${")
		if i < 0 {
			return ""
		}
		j := strings.IndexByte(raw[i:], '}')
		if j < 0 {
			return ""
		}
		name := raw[i+2 : i+j]
		if k := strings.LastIndex(name, "${"); k >= 0 {
			// A nested ${${X}}: X is the variable; the outer one is the
			// job's own (shell) syntax once X is substituted.
			raw = raw[i+2+k:]
			continue
		}
		if _, ok := vars[name]; !ok {
			if _, ok := c.Expand[name]; !ok {
				return name
			}
		}
		raw = raw[i+j:]
	}
}

// Outcome names how a run ended: "ok" (no error, exit code 0), "exit:N",
// "stopped:REASON" or "error:KIND".
func Outcome(res airlock.Result, err error) string {
	if err != nil {
		if s, ok := airlock.AsStop(err); ok {
			return "stopped:" + string(s.Reason)
		}
		return "error:" + string(airlock.KindOf(err))
	}
	if res.ExitCode != 0 {
		return "exit:" + strconv.Itoa(res.ExitCode)
	}
	return "ok"
}

// Verdict is the judgement of one case on one tier.
type Verdict struct {
	Case    string `json:"case"`
	Area    string `json:"area"`
	Class   Class  `json:"class"`
	Tier    string `json:"tier"`
	Outcome string `json:"outcome"`
	Pass    bool   `json:"pass"`
	Detail  string `json:"detail,omitempty"`
}

// Judge compares a run's result with the case's expectation. secrets are
// canary values that must appear nowhere in the result.
func (c *Case) Judge(res airlock.Result, err error, secrets ...string) Verdict {
	v := Verdict{Case: c.ID, Area: c.Area, Class: c.Class, Tier: res.Tier, Outcome: Outcome(res, err)}
	fail := func(format string, args ...any) Verdict {
		v.Detail = fmt.Sprintf(format, args...)
		return v
	}
	want := c.Expect.AnyOf
	if len(want) == 0 {
		want = []string{"ok"}
	}
	matched := false
	for _, w := range want {
		if w == v.Outcome || (w == "exit:nonzero" && strings.HasPrefix(v.Outcome, "exit:")) {
			matched = true
		}
	}
	if !matched {
		msg := ""
		if err != nil {
			msg = ": " + err.Error()
		}
		return fail("outcome %s, want one of %v%s", v.Outcome, want, value.Clip(msg, 300))
	}
	everything := fmt.Sprint(res.Value) + "\x00" + res.Stdout + "\x00" + res.Stderr
	// What came back through collect is as much the result as the output.
	for _, name := range value.SortedKeys(res.Files) {
		everything += "\x00" + name + "\x00" + res.Files[name]
	}
	everything += "\x00" + strings.Join(res.FilesSkipped, "\x00")
	if err != nil {
		everything += "\x00" + err.Error()
	}
	for _, s := range append(append([]string{}, c.Expect.NotContains...), secrets...) {
		if s != "" && strings.Contains(everything, s) {
			return fail("result contains %q", s)
		}
	}
	if len(c.Expect.Value) > 0 {
		var want any
		if e := json.Unmarshal(c.Expect.Value, &want); e != nil {
			return fail("bad expected value: %v", e)
		}
		gotJSON, e := json.Marshal(res.Value)
		if e != nil {
			return fail("value does not encode: %v", e)
		}
		var got any
		_ = json.Unmarshal(gotJSON, &got)
		if !reflect.DeepEqual(got, want) {
			return fail("value %s, want %s", value.Clip(string(gotJSON), 300), value.Clip(string(c.Expect.Value), 300))
		}
	}
	if c.Expect.Stdout != nil && res.Stdout != *c.Expect.Stdout {
		return fail("stdout %q, want %q", value.Clip(res.Stdout, 300), *c.Expect.Stdout)
	}
	for _, s := range c.Expect.Contains {
		if !strings.Contains(res.Stdout+res.Stderr, s) {
			return fail("output lacks %q (stdout %q, stderr %q)", s, value.Clip(res.Stdout, 300), value.Clip(res.Stderr, 300))
		}
	}
	v.Pass = true
	return v
}

// Applies reports whether the case is meant for the tier (its kind, and
// the case's tier list if it has one).
func (c *Case) Applies(tier string) bool {
	if len(c.Tiers) == 0 {
		return true
	}
	for _, t := range c.Tiers {
		if t == tier {
			return true
		}
	}
	return false
}

// Run builds the case's job, runs it on the tier and judges the result.
// A case the tier does not admit is reported as such (Outcome
// "error:not_admitted"), which passes only where the case expects it.
func (c *Case) Run(ctx context.Context, tier airlock.Tier, vars map[string]string, secrets ...string) Verdict {
	job, err := c.BuildJob(vars)
	if err != nil {
		return Verdict{Case: c.ID, Area: c.Area, Class: c.Class, Tier: tier.Name(), Outcome: "error:invalid", Detail: err.Error()}
	}
	res, err := c.Exec(ctx, tier, job, vars)
	if res.Tier == "" {
		res.Tier = tier.Name()
	}
	return c.Judge(res, err, secrets...)
}
