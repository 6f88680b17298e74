package approve

import (
	"fmt"
	"slices"

	"github.com/airlock-sandbox/airlock"
)

// Policy says which jobs need an approval before they run. A job needs one
// when any rule matches it. The zero Policy requires none.
type Policy struct {
	Rules []Rule `json:"rules"`
}

// Rule matches jobs. Empty fields match everything; a set boolean matches
// jobs that are (true) or are not (false) granted that capability. A rule
// with no field set matches every job.
type Rule struct {
	Name       string              `json:"name"`
	Kinds      []airlock.Kind      `json:"kinds,omitempty"`
	Situations []airlock.Situation `json:"situations,omitempty"`
	Tiers      []string            `json:"tiers,omitempty"`
	Net        *bool               `json:"net,omitempty"`
	Spawn      *bool               `json:"spawn,omitempty"`
	// Secrets matches jobs handed credentials: values (grants.secrets)
	// or references (grants.credentials).
	Secrets *bool `json:"secrets,omitempty"`
	FSRead  *bool `json:"fs_read,omitempty"`
}

// DefaultPolicy requires an approval for any job with a network grant, of
// every kind (a WASM module's or a Starlark script's requests carry data
// out as a command's do), and for any job that is handed credentials.
func DefaultPolicy() Policy {
	t := true
	return Policy{Rules: []Rule{
		{Name: "network", Net: &t},
		{Name: "credentials", Secrets: &t},
	}}
}

// Validate checks the rules' names and values.
func (p Policy) Validate() error {
	seen := map[string]bool{}
	for i, r := range p.Rules {
		if r.Name == "" {
			return fmt.Errorf("approval rule %d has no name", i)
		}
		if seen[r.Name] {
			return fmt.Errorf("two approval rules named %q", r.Name)
		}
		seen[r.Name] = true
		for _, k := range r.Kinds {
			if !slices.Contains([]airlock.Kind{airlock.KindExpr, airlock.KindStarlark, airlock.KindWasm, airlock.KindCommand}, k) {
				return fmt.Errorf("approval rule %s: unknown kind %q", r.Name, k)
			}
		}
		for _, s := range r.Situations {
			j := airlock.Job{Kind: airlock.KindExpr, Code: "1", Situation: s}
			if err := j.Validate(); err != nil {
				return fmt.Errorf("approval rule %s: unknown situation %q", r.Name, s)
			}
		}
	}
	return nil
}

// Requires returns the name of the first rule that makes job, running on
// tier, need an approval, or "" when it needs none.
func (p Policy) Requires(job *airlock.Job, tier string) string {
	for i := range p.Rules {
		if p.Rules[i].matches(job, tier) {
			return p.Rules[i].Name
		}
	}
	return ""
}

func (r *Rule) matches(job *airlock.Job, tier string) bool {
	situation := job.Situation
	if situation == "" {
		situation = airlock.SituationPublic
	}
	g := &job.Grants
	return (len(r.Kinds) == 0 || slices.Contains(r.Kinds, job.Kind)) &&
		(len(r.Situations) == 0 || slices.Contains(r.Situations, situation)) &&
		(len(r.Tiers) == 0 || slices.Contains(r.Tiers, tier)) &&
		flag(r.Net, len(g.Net) > 0) &&
		flag(r.Spawn, g.Spawn) &&
		flag(r.Secrets, len(g.Secrets) > 0 || len(g.Credentials) > 0) &&
		flag(r.FSRead, len(g.FS.Read) > 0)
}

func flag(want *bool, have bool) bool { return want == nil || *want == have }
