package escalate_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/escalate"
	"github.com/airlock-sandbox/airlock/interp/expr"
)

// levelTier is a stand-in for an OS-backed tier in these pure routing
// tests: it has a name, a level, a cost and the kinds it admits, and it
// refuses to run (routing never runs it). The real tiers run their own
// suites.
type levelTier struct {
	name  string
	level airlock.Level
	cost  time.Duration
	kinds []airlock.Kind
	down  error
}

func (t *levelTier) Cost() time.Duration { return t.cost }

func (t *levelTier) Name() string         { return t.name }
func (t *levelTier) Level() airlock.Level { return t.level }
func (t *levelTier) Admit(j airlock.Job) error {
	for _, k := range t.kinds {
		if k == j.Kind {
			return nil
		}
	}
	return &airlock.NotAdmitted{Tier: t.name, Reason: "runs only " + string(t.kinds[0])}
}
func (t *levelTier) Run(context.Context, airlock.Job) (airlock.Result, error) {
	return airlock.Result{}, errors.New("levelTier does not run jobs")
}
func (t *levelTier) Available() error { return t.down }

func tiers(gvisorDown error) []airlock.Tier {
	cmd := []airlock.Kind{airlock.KindCommand}
	return []airlock.Tier{
		&levelTier{name: "microvm", level: 4, cost: 1500 * time.Millisecond, kinds: cmd},
		&levelTier{name: "gvisor", level: 4, cost: 400 * time.Millisecond, kinds: cmd, down: gvisorDown},
		&levelTier{name: "process", level: 3, cost: 12 * time.Millisecond, kinds: cmd},
		&levelTier{name: "seccomp", level: 2, cost: 3 * time.Millisecond, kinds: cmd},
		expr.New(),
	}
}

func newRouter(t *testing.T, down error) *escalate.Router {
	r, err := escalate.New(escalate.DefaultPolicy(), tiers(down))
	require.NoError(t, err)
	return r
}

func TestDefaultPolicyRoutes(t *testing.T) {
	r := newRouter(t, nil)
	cases := []struct {
		job  airlock.Job
		want string
	}{
		{airlock.Job{Kind: "expr", Code: "1"}, "expr"},
		{airlock.Job{Kind: "expr", Code: "1", Situation: "public"}, "expr"},
		{airlock.Job{Kind: "command", Argv: []string{"true"}, Situation: "internal"}, "process"},
		{airlock.Job{Kind: "command", Argv: []string{"true"}, Situation: "public"}, "gvisor"},
		{airlock.Job{Kind: "command", Argv: []string{"true"}}, "gvisor"},
		{airlock.Job{Kind: "command", Argv: []string{"true"}, Situation: "multi-tenant"}, "gvisor"},
	}
	for _, c := range cases {
		tier, err := r.Route(&c.job)
		require.NoError(t, err, "%+v", c.job)
		assert.Equal(t, c.want, tier.Name(), "%+v", c.job)
	}
}

func TestFallsBackWhenUnavailable(t *testing.T) {
	r := newRouter(t, errors.New("runsc not found"))
	job := airlock.Job{Kind: "command", Argv: []string{"true"}, Situation: "public"}
	tier, err := r.Route(&job)
	require.NoError(t, err)
	assert.Equal(t, "microvm", tier.Name())
	assert.Contains(t, strings.Join(r.Explain(&job).Lines(), "\n"), "gvisor: passed over: unavailable: runsc not found")
}

func TestNothingRunsBelowItsMinimum(t *testing.T) {
	r := newRouter(t, nil)
	var na *airlock.NotAdmitted
	// An explicit tier below the minimum is refused.
	job := airlock.Job{Kind: "command", Argv: []string{"true"}, Situation: "public", Tier: "process"}
	_, err := r.Route(&job)
	require.ErrorAs(t, err, &na)
	assert.Contains(t, err.Error(), "below the minimum")
	// Credentials need level 5 and no tier here has it.
	job = airlock.Job{Kind: "command", Argv: []string{"true"}, Situation: "credentials"}
	_, err = r.Route(&job)
	require.ErrorAs(t, err, &na)
	// Multi-tenant is ephemeral only.
	job = airlock.Job{Kind: "command", Argv: []string{"true"}, Situation: "multi-tenant", Lifecycle: "session", Session: "s"}
	_, err = r.Route(&job)
	require.ErrorAs(t, err, &na)
	// A language job with grants is not hermetic: it needs its situation's level.
	job = airlock.Job{Kind: "expr", Code: "1", Situation: "public", Grants: airlock.Grants{Spawn: true}}
	_, err = r.Route(&job)
	require.ErrorAs(t, err, &na)
	// An unknown tier name is invalid input.
	job = airlock.Job{Kind: "expr", Code: "1", Tier: "nope"}
	_, err = r.Route(&job)
	var inv *airlock.InvalidJob
	require.ErrorAs(t, err, &inv)
}

// TestDefaultSituationNamed: a refusal of a job that named no situation
// says the default applied; one that named it does not.
func TestDefaultSituationNamed(t *testing.T) {
	r := newRouter(t, nil)
	for _, job := range []airlock.Job{
		{Kind: "command", Argv: []string{"true"}, Tier: "process"},     // an explicit tier below the minimum
		{Kind: "expr", Code: "1", Grants: airlock.Grants{Spawn: true}}, // no tier at the level admits it
	} {
		_, err := r.Route(&job)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "names no situation, so public applies")
		job.Situation = airlock.SituationPublic
		_, err = r.Route(&job)
		require.Error(t, err)
		assert.NotContains(t, err.Error(), "names no situation")
	}
}

func TestPolicyAsData(t *testing.T) {
	yaml := `
rules:
  - name: public-needs-hardware
    match: {situations: [public]}
    min_level: virtualisation
    tiers: [microvm]
  - name: rest
    min_level: 1
`
	p, err := escalate.ParsePolicy([]byte(yaml))
	require.NoError(t, err)
	r, err := escalate.New(p, tiers(nil))
	require.NoError(t, err)
	job := airlock.Job{Kind: "command", Argv: []string{"true"}, Situation: "public"}
	tier, err := r.Route(&job)
	require.NoError(t, err)
	assert.Equal(t, "microvm", tier.Name(), "a policy can require hardware virtualisation")

	for _, bad := range []string{
		`{"rules": [{"name": "x", "min_level": 9}]}`,
		`{"rules": [{"name": "x", "min_level": 1, "bogus": true}]}`,
		`{"rules": [{"name": "x", "min_level": 1, "match": {"situations": ["nowhere"]}}]}`,
		`{"rules": []}`,
		`rules: [{name: x, min_level: 1, lifecycles: [forever]}]`,
	} {
		_, err := escalate.ParsePolicy([]byte(bad))
		assert.Error(t, err, bad)
	}
}

func TestRunRecordsDecision(t *testing.T) {
	r := newRouter(t, nil)
	res, err := r.Run(context.Background(), airlock.Job{Kind: "expr", Code: "x * 2", Input: map[string]any{"x": int64(21)}})
	require.NoError(t, err)
	assert.Equal(t, int64(42), res.Value)
	assert.Equal(t, "expr", res.Tier)
	require.NotEmpty(t, res.Decision)
	assert.Contains(t, res.Decision[len(res.Decision)-1], "chose expr")

	res, err = r.Run(context.Background(), airlock.Job{Kind: "command", Argv: []string{"x"}, Situation: "credentials"})
	require.Error(t, err)
	require.NotNil(t, res.Error)
	assert.Equal(t, airlock.ErrNotAdmitted, res.Error.Kind)
	assert.NotEmpty(t, res.Decision)
}

func TestRouteDoesNotAllocate(t *testing.T) {
	r := newRouter(t, nil)
	job := airlock.Job{Kind: "command", Argv: []string{"true"}, Situation: "public"}
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := r.Route(&job); err != nil {
			t.Fatal(err)
		}
	})
	assert.Zero(t, allocs)
}

func BenchmarkRoute(b *testing.B) {
	r, err := escalate.New(escalate.DefaultPolicy(), tiers(nil))
	require.NoError(b, err)
	jobs := map[string]airlock.Job{
		"expr":    {Kind: "expr", Code: "1"},
		"command": {Kind: "command", Argv: []string{"true"}, Situation: "public"},
	}
	for name, job := range jobs {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.Route(&job); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// decisionTier stands in for a tier that records its own decisions (egress
// verdicts) in the Result.
type decisionTier struct{ levelTier }

func (t *decisionTier) Run(context.Context, airlock.Job) (airlock.Result, error) {
	return airlock.Result{Tier: t.name, Decision: []string{"egress: GET a.example allowed"}}, nil
}

func TestRunKeepsTheTiersDecisions(t *testing.T) {
	tier := &decisionTier{levelTier{name: "gvisor", level: 4, kinds: []airlock.Kind{airlock.KindCommand}}}
	r, err := escalate.New(escalate.DefaultPolicy(), []airlock.Tier{tier})
	require.NoError(t, err)
	job := airlock.Job{Kind: "command", Argv: []string{"true"}}
	for range 2 { // the second run must not see the first's lines
		res, err := r.Run(context.Background(), job)
		require.NoError(t, err)
		require.Len(t, res.Decision, 3, "%q", res.Decision)
		assert.Contains(t, res.Decision[0], "rule public")
		assert.Contains(t, res.Decision[1], "chose gvisor")
		assert.Equal(t, "egress: GET a.example allowed", res.Decision[2])
	}
}

// selfTier admits in its Run (AdmitsInRun, see airlock.Tier): it counts the Admit
// calls it gets and the runs it refuses or accepts.
type selfTier struct {
	levelTier
	admits, refusals, runs int
}

func (t *selfTier) AdmitsInRun() {}
func (t *selfTier) Admit(j airlock.Job) error {
	t.admits++
	return t.levelTier.Admit(j)
}
func (t *selfTier) Run(_ context.Context, j airlock.Job) (airlock.Result, error) {
	if err := t.levelTier.Admit(j); err != nil {
		t.refusals++
		return airlock.Result{Tier: t.name}, err
	}
	t.runs++
	return airlock.Result{Tier: t.name, Value: "ran"}, nil
}

// A self-admitting tier is run without an Admit call; when its Run
// refuses, the router goes on to the next candidate and says why it passed
// the refusing one over, as it does after a refusing Admit.
func TestSelfAdmittingTier(t *testing.T) {
	cmd := []airlock.Kind{airlock.KindCommand}
	vm := &selfTier{levelTier: levelTier{name: "microvm", level: 4, cost: 2, kinds: cmd}}
	gv := &selfTier{levelTier: levelTier{name: "gvisor", level: 4, cost: 1, kinds: []airlock.Kind{airlock.KindWasm}}}
	r, err := escalate.New(escalate.DefaultPolicy(), []airlock.Tier{vm, gv})
	require.NoError(t, err)

	// The cheapest candidate admits: no Admit call at all.
	res, err := r.Run(context.Background(), airlock.Job{Kind: "wasm", Module: []byte("\x00asm")})
	require.NoError(t, err)
	assert.Equal(t, "gvisor", res.Tier)
	assert.Equal(t, 1, gv.runs)
	assert.Zero(t, gv.admits+vm.admits, "Run needs no Admit call for a self-admitting tier")

	// The cheapest refuses in its Run: the next one runs the job.
	res, err = r.Run(context.Background(), airlock.Job{Kind: "command", Argv: []string{"true"}})
	require.NoError(t, err)
	assert.Equal(t, "microvm", res.Tier)
	assert.Equal(t, "ran", res.Value)
	assert.Equal(t, 1, gv.refusals, "the cheaper tier was offered the job through Run")
	assert.Equal(t, 1, vm.runs)
	assert.Contains(t, strings.Join(res.Decision, "\n"), "gvisor: runs only wasm", "the refusal is explained")

	// Nothing admits: the router's own refusal, as without the interface.
	res, err = r.Run(context.Background(), airlock.Job{Kind: "starlark", Code: "result = 1"})
	var na *airlock.NotAdmitted
	require.ErrorAs(t, err, &na)
	assert.Contains(t, na.Reason, "no available tier")
	assert.Equal(t, airlock.ErrNotAdmitted, res.Error.Kind)
	assert.Equal(t, 2, gv.runs+vm.runs, "a refused job ran nowhere")
	assert.Equal(t, 3, gv.refusals+vm.refusals)

	// Route and Explain still ask Admit.
	before := vm.admits
	tier, err := r.Route(&airlock.Job{Kind: "command", Argv: []string{"true"}})
	require.NoError(t, err)
	assert.Equal(t, "microvm", tier.Name())
	assert.Greater(t, vm.admits, before)
}

// ownCost is a caller's own tier: the real expr tier under another name,
// declaring a start-up cost of its own.
type ownCost struct {
	*expr.Tier
	name string
	cost time.Duration
}

func (t ownCost) Name() string        { return t.name }
func (t ownCost) Cost() time.Duration { return t.cost }

// The router orders a tier it was handed by the cost that tier declares,
// and falls back to the level for a tier that declares none.
func TestCallersTierOrderedByItsCost(t *testing.T) {
	job := airlock.Job{Kind: airlock.KindExpr, Code: "1 + 1", Situation: airlock.SituationExpression}
	for _, c := range []struct {
		cost time.Duration
		want string
	}{{time.Nanosecond, "mine"}, {time.Second, "expr"}} {
		mine := ownCost{Tier: expr.New(), name: "mine", cost: c.cost}
		r, err := escalate.New(escalate.DefaultPolicy(), []airlock.Tier{expr.New(), mine})
		require.NoError(t, err)
		res, err := r.Run(context.Background(), job)
		require.NoError(t, err)
		assert.Equal(t, c.want, r.Tiers()[0].Name(), "cost %v", c.cost)
		assert.Contains(t, res.Decision[len(res.Decision)-1], "chose "+c.want, "cost %v", c.cost)
		assert.Equal(t, int64(2), res.Value)
	}
	// Without a declared cost a tier is ordered by its level: after the
	// declared interpreter tiers, before a declared level-4 one.
	bare := &levelTier{name: "bare", level: 1, kinds: []airlock.Kind{airlock.KindExpr}}
	noCost := struct{ airlock.Tier }{bare} // hides Cost
	vm := &levelTier{name: "vm", level: 4, cost: 2 * time.Second, kinds: []airlock.Kind{airlock.KindCommand}}
	r, err := escalate.New(escalate.DefaultPolicy(), []airlock.Tier{vm, noCost, expr.New()})
	require.NoError(t, err)
	var names []string
	for _, tier := range r.Tiers() {
		names = append(names, tier.Name())
	}
	assert.Equal(t, []string{"expr", "bare", "vm"}, names)
}

// A job with credentials or an account runs only at level 5: a tier
// below that admits its kind is passed over while routing (its Prepare
// would refuse the job at run), so Explain and Run say the same.
func TestCredentialsNeverRouteBelowAccount(t *testing.T) {
	r := newRouter(t, nil)
	for _, job := range []airlock.Job{
		{Kind: "command", Argv: []string{"true"}, Grants: airlock.Grants{Credentials: []airlock.Credential{{Env: "TOKEN", Ref: "github"}}}},
		{Kind: "command", Argv: []string{"true"}, Account: "alice"},
		{Kind: "command", Argv: []string{"true"}, Account: "alice", Tier: "gvisor"},
		{Kind: "expr", Code: "1", Situation: "expression", Account: "alice"},
		{Kind: "expr", Code: "1", Situation: "expression", Account: "alice", Tier: "expr"},
	} {
		x := r.Explain(&job)
		assert.Empty(t, x.Chosen, "%+v", job)
		assert.NotEmpty(t, x.Refused, "%+v", job)
		for _, s := range x.Steps {
			assert.NotEqual(t, "chosen", s.Verdict, "%+v: %+v", job, s)
		}
		_, err := r.Route(&job)
		var na *airlock.NotAdmitted
		require.ErrorAs(t, err, &na, "%+v", job)
		assert.Contains(t, err.Error(), "level 5", "%+v", job)
		_, err = r.Run(context.Background(), job)
		require.ErrorAs(t, err, &na, "%+v", job)
		assert.NotContains(t, err.Error(), "does not run jobs", "%+v", job)
	}
}

// runRefuser is a self-admitting tier (AdmitsInRun) that admits every
// command job but refuses it in Run: a tier that cannot honour a job it
// admitted.
type runRefuser struct{ levelTier }

func (*runRefuser) AdmitsInRun() {}
func (t *runRefuser) Run(context.Context, airlock.Job) (airlock.Result, error) {
	err := &airlock.NotAdmitted{Tier: t.name, Reason: "cannot honour it"}
	res := airlock.Result{Tier: t.name, Level: t.level}
	res.SetError(err)
	return res, err
}

// runCounter runs every command job and counts the runs.
type runCounter struct {
	levelTier
	runs int
}

func (t *runCounter) Run(context.Context, airlock.Job) (airlock.Result, error) {
	t.runs++
	return airlock.Result{Tier: t.name, Level: t.level}, nil
}

// A job the tier Route and Explain chose refuses in its own Run is
// refused by that tier; it is not run on another tier than the
// explanation names. RunOn runs on the named tier or nowhere.
func TestRunDoesNotMoveOnAfterRunRefuses(t *testing.T) {
	cmd := []airlock.Kind{airlock.KindCommand}
	other := &runCounter{levelTier: levelTier{name: "gvisor", level: 4, cost: 400 * time.Millisecond, kinds: cmd}}
	r, err := escalate.New(escalate.DefaultPolicy(), []airlock.Tier{
		&runRefuser{levelTier{name: "cheap", level: 4, cost: 10 * time.Millisecond, kinds: cmd}},
		other,
	})
	require.NoError(t, err)
	job := airlock.Job{Kind: "command", Argv: []string{"true"}, Situation: "public"}
	require.Equal(t, "cheap", r.Explain(&job).Chosen)
	res, err := r.Run(context.Background(), job)
	var na *airlock.NotAdmitted
	require.ErrorAs(t, err, &na)
	assert.Equal(t, "cheap", res.Tier)
	assert.Zero(t, other.runs, "run on a tier the explanation did not choose")

	_, err = r.RunOn(context.Background(), job, "gvisor")
	require.ErrorAs(t, err, &na)
	assert.Contains(t, err.Error(), "chooses tier cheap")
	assert.Zero(t, other.runs)
	job.Tier = "gvisor"
	res, err = r.RunOn(context.Background(), job, "gvisor")
	require.NoError(t, err)
	assert.Equal(t, 1, other.runs)
	assert.Contains(t, strings.Join(res.Decision, "\n"), "gvisor: chosen: requested by the job")
}

// A policy reads one way only: a field given twice (the last would win
// in JSON) or in another case than its name, data after the policy, two
// rules of one name, and a rule that never applies (every job it matches
// meets an earlier rule first, so its minimum does not hold) are errors.
func TestPolicyReadsOneWay(t *testing.T) {
	for _, c := range []struct{ policy, want string }{
		{`{"rules": [{"name": "x", "min_level": 5, "min_level": 1}]}`, "rules.min_level: given twice"},
		{`{"rules": [{"name": "x", "min_level": 5}], "rules": [{"name": "y", "min_level": 1}]}`, "rules: given twice"},
		{`{"rules": [{"name": "x", "Min_Level": 1}]}`, `write the field as "min_level"`},
		{"rules:\n  - name: x\n    min_level: 5\n    MIN_LEVEL: 1\n", `write the field as "min_level"`},
		{`{"rules": [{"name": "x", "min_level": 1, "match": {"Situations": ["public"]}}]}`, `write the field as "situations"`},
		{`{"rules": [{"name": "x", "min_level": 5}]} {"rules": [{"name": "y", "min_level": 1}]}`, "more data after the policy"},
		{`{"rules": [{"name": "x", "min_level": 4, "match": {"situations": ["public"]}}, {"name": "x", "min_level": 1}]}`, "another rule has that name"},
		{"rules:\n  - {name: everything, min_level: 1}\n  - {name: public, min_level: 4, match: {situations: [public]}}\n", "rule 1 (public) never applies"},
		{`{"rules": [{"name": "commands", "min_level": 3, "match": {"kinds": ["command"]}}, {"name": "public-commands", "min_level": 4, "match": {"kinds": ["command"], "situations": ["public"]}}, {"name": "rest", "min_level": 4}]}`, "rule 1 (public-commands) never applies"},
	} {
		_, err := escalate.ParsePolicy([]byte(c.policy))
		if assert.Error(t, err, c.policy) {
			assert.Contains(t, err.Error(), c.want, c.policy)
		}
	}
	// The default policy, written out, reads back as itself.
	p, err := escalate.ParsePolicy(mustJSON(t, escalate.DefaultPolicy()))
	require.NoError(t, err)
	assert.Equal(t, escalate.DefaultPolicy(), p)
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	require.NoError(t, err)
	return data
}

// A job that names a session runs in it: it is of lifecycle session for
// the rules that allow only some lifecycles.
func TestSessionJobsKeepTheRulesLifecycles(t *testing.T) {
	r := newRouter(t, nil)
	job := airlock.Job{Kind: "command", Argv: []string{"true"}, Situation: "multi-tenant", Session: "s-1"}
	_, err := r.Route(&job)
	var na *airlock.NotAdmitted
	require.ErrorAs(t, err, &na)
	assert.Contains(t, err.Error(), "allows only lifecycles [ephemeral], not session")
	job.Situation = "public"
	_, err = r.Route(&job)
	require.NoError(t, err)
}

// A rule's tiers name tiers the router has: "GVisor" or " microvm" would
// leave the rule's jobs no tier at all.
func TestPolicyTiersNameTheRoutersTiers(t *testing.T) {
	for _, name := range []string{"GVisor", " microvm", "micro-vm"} {
		p := escalate.Policy{Rules: []escalate.Rule{{Name: "hardware", MinLevel: 4, Tiers: []string{name}}}}
		_, err := escalate.New(p, tiers(nil))
		if assert.Error(t, err, name) {
			assert.Contains(t, err.Error(), "no tier named")
		}
	}
	p := escalate.Policy{Rules: []escalate.Rule{{Name: "hardware", MinLevel: 4, Tiers: []string{"microvm"}}}}
	_, err := escalate.New(p, tiers(nil))
	require.NoError(t, err)
}

// TestUnknownKindOrSituationInvalid: a typo in a job's kind or situation
// is invalid input naming the field and the values it takes, not a
// refusal by the policy.
func TestUnknownKindOrSituationInvalid(t *testing.T) {
	r := newRouter(t, nil)
	for _, tc := range []struct {
		job   airlock.Job
		field string
	}{
		{airlock.Job{Kind: "command", Argv: []string{"true"}, Situation: "publik"}, "situation"},
		{airlock.Job{Kind: "command", Argv: []string{"true"}, Situation: "publik", Tier: "process"}, "situation"},
		{airlock.Job{Kind: "pythn", Code: "1"}, "kind"},
		{airlock.Job{Code: "1"}, "kind"},
	} {
		_, err := r.Route(&tc.job)
		var inv *airlock.InvalidJob
		require.ErrorAs(t, err, &inv, "%+v", tc.job)
		assert.Equal(t, tc.field, inv.Field)
		assert.Contains(t, err.Error(), "want ")
	}
}

// TestTooWeakTierNamesItsSituations: a job sent to a tier below its
// rule's minimum is told in which situations the policy would run it
// there (a level-2 tier: not internal, which the default hint names);
// none when no situation would, nothing when the tier refuses the job
// whatever the situation.
func TestTooWeakTierNamesItsSituations(t *testing.T) {
	r := newRouter(t, nil)
	for _, tc := range []struct {
		job       airlock.Job
		want, not string
	}{
		{airlock.Job{Kind: "command", Argv: []string{"true"}, Tier: "seccomp"}, "the policy runs it on seccomp only in situation expression", ""},
		{airlock.Job{Kind: "command", Argv: []string{"true"}, Tier: "seccomp", Situation: "internal"}, "only in situation expression", ""},
		{airlock.Job{Kind: "command", Argv: []string{"true"}, Tier: "process"}, "only in situation expression or internal", ""},
		{airlock.Job{Kind: "command", Argv: []string{"true"}, Tier: "expr"}, "", "only in situation"},
	} {
		_, err := r.Route(&tc.job)
		var na *airlock.NotAdmitted
		require.ErrorAs(t, err, &na, "%+v", tc.job)
		if tc.want != "" {
			assert.Contains(t, err.Error(), tc.want)
		}
		if tc.not != "" {
			assert.NotContains(t, err.Error(), tc.not)
		}
	}
	// A policy where no situation allows level 2.
	p := escalate.DefaultPolicy()
	p.Rules = p.Rules[:1:1]
	p.Rules = append(p.Rules, escalate.Rule{Name: "all", MinLevel: airlock.LevelContainer})
	r2, err := escalate.New(p, tiers(nil))
	require.NoError(t, err)
	_, err = r2.Route(&airlock.Job{Kind: "command", Argv: []string{"true"}, Tier: "seccomp"})
	assert.ErrorContains(t, err, "no situation lets the policy run this job on seccomp")
}

// TestNoneAdmitsSaysWhyItsOwnTierRefused: when no tier admits a language
// job, the refusal carries what the tier named after its kind said about
// the job (an expression given argv), not only that no tier admitted it.
func TestNoneAdmitsSaysWhyItsOwnTierRefused(t *testing.T) {
	r := newRouter(t, nil)
	_, err := r.Route(&airlock.Job{Kind: "expr", Code: "1", Argv: []string{"a"}})
	var na *airlock.NotAdmitted
	require.ErrorAs(t, err, &na)
	assert.Contains(t, err.Error(), "; expr: expressions take input variables only")
	assert.Equal(t, 1, strings.Count(err.Error(), "expressions take input variables only"), err.Error())
	// A command job has no tier of its kind's name: nothing is added.
	_, err = r.Route(&airlock.Job{Kind: "command", Argv: []string{"true"}, Situation: "credentials"})
	require.ErrorAs(t, err, &na)
	assert.NotContains(t, err.Error(), "; command:")
}
