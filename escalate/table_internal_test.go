package escalate

import (
	"errors"
	"testing"

	"github.com/airlock-sandbox/airlock"
)

// ruleByScan is the router's rule choice without the table: every rule
// tried in order, as the policy reads.
func ruleByScan(p *Policy, job *airlock.Job) int {
	for i := range p.Rules {
		if p.Rules[i].Match.matches(job.Kind, situationOf(job), job.Grants.Hermetic()) {
			return i
		}
	}
	return -1
}

// TestRuleTableAgreesWithScan: for every kind, situation (known, empty and
// unknown: invalid), grant and lifecycle, the table lookup picks the rule that a
// scan of the policy picks, for the default policy and for policies whose
// rules overlap, restrict lifecycles or match nothing.
func TestRuleTableAgreesWithScan(t *testing.T) {
	f := false
	policies := map[string]Policy{
		"default": DefaultPolicy(),
		"overlapping": {Rules: []Rule{
			{Name: "wasm-public", Match: Match{Kinds: []airlock.Kind{airlock.KindWasm}, Situations: []airlock.Situation{airlock.SituationPublic}}, MinLevel: airlock.LevelVirtualisation},
			{Name: "granted", Match: Match{Hermetic: &f}, MinLevel: airlock.LevelContainer},
			{Name: "ephemeral-scripts", Match: Match{Kinds: []airlock.Kind{airlock.KindStarlark, airlock.KindExpr}}, MinLevel: airlock.LevelInterpreter, Lifecycles: []airlock.Lifecycle{airlock.LifecycleEphemeral}},
			{Name: "internal", Match: Match{Situations: []airlock.Situation{airlock.SituationInternal}}, MinLevel: airlock.LevelContainer},
		}},
		"commands only": {Rules: []Rule{
			{Name: "commands", Match: Match{Kinds: []airlock.Kind{airlock.KindCommand}}, MinLevel: airlock.LevelVirtualisation},
		}},
	}
	kinds := append(tableKinds[:], "", "lua")
	situations := append(tableSituations[:], "", "unknown")
	lifecycles := []airlock.Lifecycle{"", airlock.LifecycleEphemeral, airlock.LifecycleSession, airlock.LifecyclePersistent}
	for name, p := range policies {
		if err := p.Validate(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		r, err := New(p, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, kind := range kinds {
			for _, situation := range situations {
				for _, spawn := range []bool{false, true} {
					for _, lc := range lifecycles {
						job := airlock.Job{Kind: kind, Situation: situation, Lifecycle: lc, Grants: airlock.Grants{Spawn: spawn}}
						got, gotErr := r.rule(&job)
						if kindIndex(kind) < 0 || situationIndex(situation) < 0 {
							// Outside the closed sets: invalid input, no rule.
							var inv *airlock.InvalidJob
							if got != -1 || !errors.As(gotErr, &inv) {
								t.Errorf("%s: %s/%s: rule %d, error %v; want -1 and an invalid job", name, kind, situation, got, gotErr)
							}
							continue
						}
						want := ruleByScan(&r.policy, &job)
						if got != want {
							t.Errorf("%s: %s/%s spawn=%v lifecycle=%q: rule %d, a scan finds %d", name, kind, situation, spawn, lc, got, want)
						}
						if want >= 0 && len(r.policy.Rules[want].Lifecycles) == 0 && gotErr != nil {
							t.Errorf("%s: %s/%s: %v", name, kind, situation, gotErr)
						}
					}
				}
			}
		}
	}
}
