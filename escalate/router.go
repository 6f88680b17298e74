// Package escalate is airlock's router: it turns a job's situation and
// needs into a minimum isolation level (a [Policy], which is data), then
// picks the cheapest tier at or above that level that admits the job.
// Nothing ever runs below its minimum, and every decision is explainable.
package escalate

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/jobs"
)

// TierAuto, as a job's tier, lets the router choose (the default).
const TierAuto = "auto"

// coster is implemented by tiers that declare their typical start-up
// cost; the router orders tiers by it, cheapest first.
type coster interface{ Cost() time.Duration }

type entry struct {
	tier        airlock.Tier
	name        string
	level       airlock.Level
	cost        time.Duration
	unavailable error
	// selfAdmits: the tier's Run admits the job itself (an AdmitsInRun method, see airlock.Tier),
	// so Run skips the separate Admit call.
	selfAdmits bool
}

// admit is the tier's Admit, after the refusal every tier below level 5
// gives a job with credentials or an account (Job.RefusedBelowAccount):
// the tier's Prepare would refuse it at run, so routing refuses it first
// and Explain says what Run does.
func (e *entry) admit(job *airlock.Job) error {
	if err := e.belowAccount(job); err != nil {
		return err
	}
	return e.tier.Admit(*job)
}

// belowAccount is Job.RefusedBelowAccount for a tier below level 5.
func (e *entry) belowAccount(job *airlock.Job) error {
	if e.level >= airlock.LevelAccount {
		return nil
	}
	if err := job.RefusedBelowAccount(); err != nil {
		err.(*airlock.NotAdmitted).Tier = e.name
		return err
	}
	return nil
}

// Router chooses a tier for each job. It is safe for concurrent use.
type Router struct {
	policy    Policy
	tiers     []entry
	decisions [][][]string // [rule][tier]: reasons when nothing cheaper refused admission
	table     ruleTable
}

// New builds a router over the given tiers, ordered by the start-up cost
// each declares with a method Cost() time.Duration, cheapest first; a tier
// that declares none is placed as if it cost its level in seconds. Tiers implementing airlock.Prober are probed once here;
// unavailable ones are kept for explanations but never chosen.
func New(policy Policy, tiers []airlock.Tier) (*Router, error) {
	if err := policy.Validate(); err != nil {
		return nil, err
	}
	r := &Router{policy: policy}
	r.table = newRuleTable(&r.policy)
	seen := map[string]bool{}
	for _, t := range tiers {
		name := t.Name()
		if seen[name] {
			return nil, fmt.Errorf("two tiers named %q", name)
		}
		seen[name] = true
		e := entry{tier: t, name: name, level: t.Level()}
		if c, ok := t.(coster); ok {
			e.cost = c.Cost()
		} else {
			e.cost = time.Duration(e.level) * time.Second
		}
		_, e.selfAdmits = t.(interface{ AdmitsInRun() })
		if p, ok := t.(airlock.Prober); ok {
			e.unavailable = p.Available()
		}
		r.tiers = append(r.tiers, e)
	}
	// A rule's tiers name the router's: a name written otherwise (another
	// case, a space) would let the rule's jobs run nowhere, silently.
	for _, rule := range policy.Rules {
		for _, name := range rule.Tiers {
			if !seen[name] {
				return nil, fmt.Errorf("rule %s: no tier named %q (the tiers: %s)", rule.Name, name, strings.Join(slices.Sorted(maps.Keys(seen)), ", "))
			}
		}
	}
	sort.SliceStable(r.tiers, func(i, j int) bool { return r.tiers[i].cost < r.tiers[j].cost })
	r.decisions = make([][][]string, len(policy.Rules))
	for ri, rule := range policy.Rules {
		r.decisions[ri] = make([][]string, len(r.tiers))
		for ti := range r.tiers {
			r.decisions[ri][ti] = r.staticReasons(ri, ti, rule)
		}
	}
	return r, nil
}

// Policy returns the router's policy.
func (r *Router) Policy() Policy { return r.policy }

// Tiers returns the tiers, cheapest first.
func (r *Router) Tiers() []airlock.Tier {
	out := make([]airlock.Tier, len(r.tiers))
	for i, e := range r.tiers {
		out[i] = e.tier
	}
	return out
}

// Unavailable returns why a tier cannot run jobs here, or nil.
func (r *Router) Unavailable(name string) error {
	for _, e := range r.tiers {
		if e.name == name {
			return e.unavailable
		}
	}
	return fmt.Errorf("no tier named %q", name)
}

func situationOf(job *airlock.Job) airlock.Situation {
	if job.Situation == "" {
		return airlock.SituationPublic
	}
	return job.Situation
}

// The kinds and situations the router's rule table is indexed by.
var (
	tableKinds      = [...]airlock.Kind{airlock.KindExpr, airlock.KindStarlark, airlock.KindWasm, airlock.KindCommand}
	tableSituations = [...]airlock.Situation{airlock.SituationExpression, airlock.SituationInternal, airlock.SituationPublic, airlock.SituationMultiTenant, airlock.SituationCredentials}
)

// ruleTable holds, for every known kind, situation and hermetic or not,
// the index of the first rule whose Match selects such a job (-1: none),
// so that routing a job costs a lookup rather than string comparisons
// against every rule. Lifecycles are checked after the lookup.
type ruleTable [len(tableKinds)][len(tableSituations)][2]int32

func newRuleTable(p *Policy) (t ruleTable) {
	for k, kind := range tableKinds {
		for s, situation := range tableSituations {
			for h := range 2 {
				t[k][s][h] = -1
				for i := range p.Rules {
					if p.Rules[i].Match.matches(kind, situation, h == 1) {
						t[k][s][h] = int32(i)
						break
					}
				}
			}
		}
	}
	return t
}

func kindIndex(k airlock.Kind) int {
	switch k {
	case airlock.KindExpr:
		return 0
	case airlock.KindStarlark:
		return 1
	case airlock.KindWasm:
		return 2
	case airlock.KindCommand:
		return 3
	}
	return -1
}

func situationIndex(s airlock.Situation) int {
	switch s {
	case airlock.SituationExpression:
		return 0
	case airlock.SituationInternal:
		return 1
	case airlock.SituationPublic, "":
		return 2
	case airlock.SituationMultiTenant:
		return 3
	case airlock.SituationCredentials:
		return 4
	}
	return -1
}

func (r *Router) rule(job *airlock.Job) (int, error) {
	// A kind or situation outside the closed sets is the caller's typo,
	// not a job the policy refuses: say so, as the tiers do.
	k, s := kindIndex(job.Kind), situationIndex(job.Situation)
	switch {
	case k < 0 && job.Kind == "":
		return -1, jobs.Invalid("kind", "is missing (want expr, starlark, wasm or command)")
	case k < 0:
		return -1, jobs.Invalid("kind", "unknown kind %q (want expr, starlark, wasm or command)", job.Kind)
	case s < 0:
		return -1, jobs.Invalid("situation", "unknown situation %q (want expression, internal, public, multi-tenant or credentials)", job.Situation)
	}
	h := 0
	if job.Grants.Hermetic() {
		h = 1
	}
	// The table holds the first rule whose Match selects this kind,
	// situation and grant, so no Match needs checking again.
	if i := int(r.table[k][s][h]); i >= 0 {
		return i, r.lifecycle(i, job)
	}
	return -1, noRule(job)
}

// lifecycle checks the job's lifecycle against rule i's: a job that
// names none is ephemeral, or of lifecycle session when it names a
// session to run in.
func (r *Router) lifecycle(i int, job *airlock.Job) error {
	rule := &r.policy.Rules[i]
	if len(rule.Lifecycles) == 0 {
		return nil
	}
	lc := job.Lifecycle
	switch {
	case lc != "":
	case job.Session != "":
		// Run in a session, which keeps its state from run to run.
		lc = airlock.LifecycleSession
	default:
		lc = airlock.LifecycleEphemeral
	}
	if !contains(rule.Lifecycles, lc) {
		return &airlock.NotAdmitted{Reason: fmt.Sprintf("rule %s allows only lifecycles %v, not %s", rule.Name, rule.Lifecycles, lc)}
	}
	return nil
}

func noRule(job *airlock.Job) error {
	return &airlock.NotAdmitted{Reason: fmt.Sprintf("no policy rule matches a %s job in situation %s", job.Kind, situationOf(job))}
}

// Route returns the tier a job runs on. It does not allocate when it
// succeeds.
func (r *Router) Route(job *airlock.Job) (airlock.Tier, error) {
	_, ti, _, err := r.route(job)
	if err != nil {
		return nil, err
	}
	return r.tiers[ti].tier, nil
}

// route returns the rule and tier indexes, and whether a cheaper eligible
// tier refused admission (so the precomputed reasons do not apply).
func (r *Router) route(job *airlock.Job) (ri, ti int, refused bool, err error) {
	ri, err = r.rule(job)
	if err != nil {
		return ri, -1, false, err
	}
	rule := &r.policy.Rules[ri]
	if job.Tier != "" && job.Tier != TierAuto {
		for i := range r.tiers {
			e := &r.tiers[i]
			if e.name != job.Tier {
				continue
			}
			switch {
			case e.level < rule.MinLevel:
				return ri, -1, false, &airlock.NotAdmitted{Tier: e.name, Reason: fmt.Sprintf("level %d (%s) is below the minimum %d (%s) that rule %s requires%s%s", e.level, e.level, rule.MinLevel, rule.MinLevel, rule.Name, defaulted(job), r.allowingSituations(job, e))}
			case len(rule.Tiers) > 0 && !contains(rule.Tiers, e.name):
				return ri, -1, false, &airlock.NotAdmitted{Tier: e.name, Reason: fmt.Sprintf("rule %s allows only tiers %v", rule.Name, rule.Tiers)}
			case e.unavailable != nil:
				return ri, -1, false, &airlock.NotAdmitted{Tier: e.name, Reason: "unavailable: " + e.unavailable.Error()}
			}
			if err := e.admit(job); err != nil {
				return ri, -1, false, err
			}
			return ri, i, false, nil
		}
		return ri, -1, false, jobs.Invalid("tier", "unknown tier %q (see `airlock tiers`)", job.Tier)
	}
	for i := r.candidate(rule, 0); i >= 0; i = r.candidate(rule, i+1) {
		if r.tiers[i].admit(job) == nil {
			return ri, i, refused, nil
		}
		refused = true
	}
	return ri, -1, refused, r.noneAdmits(rule, job)
}

// allowingSituations names the situations in which the policy would let
// this job run on tier e, for a refusal of e as too weak: the default
// hint (internal) does not help a level-2 tier, which internal refuses too.
func (r *Router) allowingSituations(job *airlock.Job, e *entry) string {
	if e.admit(job) != nil {
		return "" // the tier would refuse it in any situation
	}
	k := kindIndex(job.Kind)
	h := 0
	if job.Grants.Hermetic() {
		h = 1
	}
	var names []string
	for s, sit := range tableSituations {
		i := r.table[k][s][h]
		if i < 0 {
			continue
		}
		rule := &r.policy.Rules[i]
		if e.level >= rule.MinLevel && (len(rule.Tiers) == 0 || contains(rule.Tiers, e.name)) {
			names = append(names, string(sit))
		}
	}
	if len(names) == 0 {
		return "; no situation lets the policy run this job on " + e.name
	}
	return "; the policy runs it on " + e.name + " only in situation " + strings.Join(names, " or ")
}

// candidate returns the first tier from index i on that rule lets a job
// use (at or above its minimum level, available, allowed), or -1.
func (r *Router) candidate(rule *Rule, i int) int {
	for ; i < len(r.tiers); i++ {
		e := &r.tiers[i]
		if e.level >= rule.MinLevel && e.unavailable == nil && (len(rule.Tiers) == 0 || contains(rule.Tiers, e.name)) {
			return i
		}
	}
	return -1
}

func (r *Router) noneAdmits(rule *Rule, job *airlock.Job) error {
	return &airlock.NotAdmitted{Reason: fmt.Sprintf("no available tier at level %d (%s) or above admits the job (rule %s%s; see `airlock explain`)%s%s", rule.MinLevel, rule.MinLevel, rule.Name, defaulted(job), r.allUnavailable(rule, job), r.ownTierRefusal(rule, job))}
}

// ownTierRefusal is the refusal of the tier named after the job's kind
// (expr, starlark, wasm), when the rule let it run the job and it said
// no: what is wrong with the job itself (an expression with argv, say),
// which a refusal that only counted tiers would hide.
func (r *Router) ownTierRefusal(rule *Rule, job *airlock.Job) string {
	for i := r.candidate(rule, 0); i >= 0; i = r.candidate(rule, i+1) {
		e := &r.tiers[i]
		if e.name != string(job.Kind) {
			continue
		}
		if err := e.admit(job); err != nil {
			var na *airlock.NotAdmitted
			if errors.As(err, &na) {
				return "; " + e.name + ": " + na.Reason
			}
			return "; " + err.Error()
		}
	}
	return ""
}

// allUnavailable says why, when no tier the rule lets a job use is
// available, when only level-5 tiers are (the account tier refuses
// grants.secrets, say), or when the job may run only at level 5: the
// refusal then carries what to do.
func (r *Router) allUnavailable(rule *Rule, job *airlock.Job) string {
	var why []string
	// A job only level 5 may run says so once, not once per tier below.
	var below error
	if rule.MinLevel < airlock.LevelAccount {
		below = job.RefusedBelowAccount()
	}
	if below != nil {
		why = append(why, below.(*airlock.NotAdmitted).Reason)
	}
	for i := range r.tiers {
		e := &r.tiers[i]
		if e.level < rule.MinLevel || (len(rule.Tiers) > 0 && !contains(rule.Tiers, e.name)) {
			continue
		}
		switch {
		case e.unavailable != nil:
			why = append(why, e.name+": unavailable: "+e.unavailable.Error())
		case e.level < airlock.LevelAccount:
			if below == nil {
				return ""
			}
		default:
			if err := e.admit(job); err != nil {
				why = append(why, err.Error())
			}
		}
	}
	if len(why) == 0 {
		return ""
	}
	return ": " + strings.Join(why, "; ")
}

// defaulted says, in a refusal, that the job named no situation and got
// the default one: the usual reason an operator's own tooling is sent to
// a stronger tier than expected.
func defaulted(job *airlock.Job) string {
	if job.Situation != "" {
		return ""
	}
	return "; the job names no situation, so " + string(airlock.SituationPublic) + " applies (untrusted code from outside; your own tooling is situation " + string(airlock.SituationInternal) + ")"
}

// Run routes the job and runs it, recording the router's reasons in the
// result's Decision.
//
// A tier that admits jobs in its own Run (an AdmitsInRun method, see airlock.Tier) is run
// without a separate Admit call; when its Run refuses a job its Admit
// refuses too, the next candidate is tried, as after a refusing Admit. A
// job a tier's Run refuses after its Admit accepted it is refused.
func (r *Router) Run(ctx context.Context, job airlock.Job) (res airlock.Result, err error) {
	var ri, ti int
	refused := false
	if job.Tier != "" && job.Tier != TierAuto {
		// Admit takes the job by value, so routing a pointer to job does
		// not move it to the heap.
		if ri, ti, refused, err = r.route(&job); err != nil {
			return r.refuse(job, err)
		}
		res, err = r.tiers[ti].tier.Run(ctx, job)
	} else {
		if ri, err = r.rule(&job); err != nil {
			return r.refuse(job, err)
		}
		rule := &r.policy.Rules[ri]
		for ti = r.candidate(rule, 0); ti >= 0; ti = r.candidate(rule, ti+1) {
			e := &r.tiers[ti]
			if e.belowAccount(&job) != nil {
				refused = true
				continue
			}
			if !e.selfAdmits {
				if e.tier.Admit(job) != nil {
					refused = true
					continue
				}
				res, err = e.tier.Run(ctx, job)
				break
			}
			res, err = e.tier.Run(ctx, job)
			if _, no := err.(*airlock.NotAdmitted); !no {
				break
			}
			if e.tier.Admit(job) == nil {
				// Run refused what Admit accepts: the tier cannot honour
				// the job as routed, and it is refused, not run elsewhere
				// than Route and Explain say.
				refused = true
				break
			}
			refused = true
		}
		if ti < 0 {
			return r.refuse(job, r.noneAdmits(rule, &job))
		}
	}
	return r.decide(res, job, ri, ti, refused), err
}

// RunOn runs the job on the named tier, which must be the one Route
// chooses for it now, and nowhere else: a caller that checked the routed
// tier (an allow-list, an approval bound to the tier) runs the job there
// or not at all. A refusal by that tier, in Admit or in Run, is the
// result; no other tier is tried.
func (r *Router) RunOn(ctx context.Context, job airlock.Job, tier string) (airlock.Result, error) {
	ri, ti, refused, err := r.route(&job)
	if err == nil && r.tiers[ti].name != tier {
		err = &airlock.NotAdmitted{Tier: tier, Reason: fmt.Sprintf("the router now chooses tier %s for the job, not %s", r.tiers[ti].name, tier)}
	}
	if err != nil {
		return r.refuse(job, err)
	}
	res, err := r.tiers[ti].tier.Run(ctx, job)
	return r.decide(res, job, ri, ti, refused), err
}

// decide puts the router's reasons for running job on tier ti under rule
// ri in front of the tier's own in res.Decision.
func (r *Router) decide(res airlock.Result, job airlock.Job, ri, ti int, refused bool) airlock.Result {
	var reasons []string
	if refused || (job.Tier != "" && job.Tier != TierAuto) {
		reasons = r.lines(job)
	} else {
		reasons = r.decisions[ri][ti] // shared: never appended to
	}
	if len(res.Decision) > 0 {
		// The tier's own decisions (egress verdicts) follow the router's.
		res.Decision = append(append(make([]string, 0, len(reasons)+len(res.Decision)), reasons...), res.Decision...)
	} else {
		res.Decision = reasons
	}
	return res
}

// refuse is the Result of a job no tier runs.
func (r *Router) refuse(job airlock.Job, err error) (airlock.Result, error) {
	res := airlock.Result{Clock: job.Clock, Seed: job.Seed}
	res.Decision = r.lines(job)
	res.SetError(err)
	return res, err
}

// lines explains a job that is not on the precomputed path. It takes the
// job by value so that only this slow path moves a copy to the heap.
func (r *Router) lines(job airlock.Job) []string { return r.Explain(&job).Lines() }

func (r *Router) staticReasons(ri, ti int, rule Rule) []string {
	out := []string{fmt.Sprintf("rule %s: minimum level %d (%s)", rule.Name, rule.MinLevel, rule.MinLevel)}
	var below []string
	for i := 0; i < ti; i++ {
		e := r.tiers[i]
		switch {
		case e.level < rule.MinLevel:
			below = append(below, e.name)
		case e.unavailable != nil:
			out = append(out, fmt.Sprintf("%s: unavailable: %v", e.name, e.unavailable))
		case len(rule.Tiers) > 0 && !contains(rule.Tiers, e.name):
			out = append(out, fmt.Sprintf("%s: not allowed by rule %s", e.name, rule.Name))
		}
	}
	if len(below) > 0 {
		out = append(out, fmt.Sprintf("%s: below level %d", strings.Join(below, ", "), rule.MinLevel))
	}
	return append(out, fmt.Sprintf("chose %s (level %d, cheapest admitted)", r.tiers[ti].name, r.tiers[ti].level))
}
