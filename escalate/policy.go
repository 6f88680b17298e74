package escalate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/jsonkeys"
)

// Policy maps a job's situation and needs to a minimum isolation level.
// Rules are tried in order; the first that matches decides. A job no rule
// matches is refused.
type Policy struct {
	Rules []Rule `json:"rules"`
}

// Rule is one row of a policy.
type Rule struct {
	// Name identifies the rule in explanations.
	Name string `json:"name"`
	// Match selects the jobs the rule applies to.
	Match Match `json:"match"`
	// MinLevel is the weakest boundary the job may run behind.
	MinLevel airlock.Level `json:"min_level"`
	// Tiers, when set, restricts the job to these tiers (for example
	// ["microvm"] to require hardware virtualisation).
	Tiers []string `json:"tiers,omitempty"`
	// Lifecycles, when set, lists the lifecycles the job may ask for.
	Lifecycles []airlock.Lifecycle `json:"lifecycles,omitempty"`
}

// Match selects jobs. Empty fields match everything; a job matches when it
// matches every field that is set.
type Match struct {
	Situations []airlock.Situation `json:"situations,omitempty"`
	Kinds      []airlock.Kind      `json:"kinds,omitempty"`
	// Hermetic, when set, matches jobs that are granted nothing (true) or
	// something (false).
	Hermetic *bool `json:"hermetic,omitempty"`
}

func yes() *bool { b := true; return &b }

// DefaultPolicy is the seed policy:
//
//	code that holds production credentials        5 account separation
//	hermetic expression, script or WASM module    1 interpreter
//	simple expression                             1 interpreter
//	internal developer tooling                    3 container
//	model-generated code from public users        4 virtualisation
//	shared multi-tenant execution                 4 virtualisation, ephemeral only
func DefaultPolicy() Policy {
	return Policy{Rules: []Rule{
		{Name: "credentials", Match: Match{Situations: []airlock.Situation{airlock.SituationCredentials}}, MinLevel: airlock.LevelAccount},
		{Name: "hermetic-language", Match: Match{Kinds: []airlock.Kind{airlock.KindExpr, airlock.KindStarlark, airlock.KindWasm}, Hermetic: yes()}, MinLevel: airlock.LevelInterpreter},
		{Name: "expression", Match: Match{Situations: []airlock.Situation{airlock.SituationExpression}}, MinLevel: airlock.LevelInterpreter},
		{Name: "internal", Match: Match{Situations: []airlock.Situation{airlock.SituationInternal}}, MinLevel: airlock.LevelContainer},
		{Name: "public", Match: Match{Situations: []airlock.Situation{airlock.SituationPublic}}, MinLevel: airlock.LevelVirtualisation},
		{Name: "multi-tenant", Match: Match{Situations: []airlock.Situation{airlock.SituationMultiTenant}}, MinLevel: airlock.LevelVirtualisation, Lifecycles: []airlock.Lifecycle{airlock.LifecycleEphemeral}},
	}}
}

// ParsePolicy reads a policy in JSON or YAML, strictly: unknown fields, a
// field given twice or in another case, and unknown situations, kinds,
// levels or lifecycles are errors.
func ParsePolicy(data []byte) (Policy, error) {
	var p Policy
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return p, fmt.Errorf("empty policy")
	}
	if trimmed[0] != '{' {
		var generic any
		if err := yaml.Unmarshal(data, &generic); err != nil {
			return p, fmt.Errorf("policy YAML: %w", err)
		}
		var err error
		if data, err = json.Marshal(generic); err != nil {
			return p, fmt.Errorf("policy YAML: %w", err)
		}
	}
	if err := jsonkeys.Check(data, reflect.TypeFor[Policy]()); err != nil {
		return p, fmt.Errorf("policy: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return p, fmt.Errorf("policy: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return p, fmt.Errorf("policy: more data after the policy")
	}
	return p, p.Validate()
}

// LoadPolicy reads a policy file (.json, .yaml or .yml).
func LoadPolicy(path string) (Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Policy{}, fmt.Errorf("reading policy: %w", err)
	}
	p, err := ParsePolicy(data)
	if err != nil {
		return p, fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	return p, nil
}

// Validate checks every rule.
func (p Policy) Validate() error {
	if len(p.Rules) == 0 {
		return fmt.Errorf("policy has no rules")
	}
	names := map[string]bool{}
	for i, r := range p.Rules {
		where := fmt.Sprintf("rule %d (%s)", i, r.Name)
		if r.Name == "" {
			return fmt.Errorf("rule %d has no name", i)
		}
		if names[r.Name] {
			return fmt.Errorf("%s: another rule has that name", where)
		}
		names[r.Name] = true
		if r.MinLevel < airlock.LevelInterpreter || r.MinLevel > airlock.LevelAccount {
			return fmt.Errorf("%s: min_level must be 1-5", where)
		}
		for _, s := range r.Match.Situations {
			j := airlock.Job{Kind: airlock.KindExpr, Code: "1", Situation: s}
			if err := j.Validate(); err != nil {
				return fmt.Errorf("%s: %w", where, err)
			}
		}
		for _, k := range r.Match.Kinds {
			switch k {
			case airlock.KindExpr, airlock.KindStarlark, airlock.KindWasm, airlock.KindCommand:
			default:
				return fmt.Errorf("%s: unknown kind %q", where, k)
			}
		}
		for _, l := range r.Lifecycles {
			switch l {
			case airlock.LifecycleEphemeral, airlock.LifecycleSession, airlock.LifecyclePersistent:
			default:
				return fmt.Errorf("%s: unknown lifecycle %q", where, l)
			}
		}
		for _, t := range r.Tiers {
			if strings.TrimSpace(t) == "" {
				return fmt.Errorf("%s: empty tier name", where)
			}
		}
	}
	// The first matching rule decides: a rule that every job it matches
	// meets an earlier rule first never applies, and its minimum, which a
	// reader takes to hold, does not.
	table := newRuleTable(&p)
	used := make([]bool, len(p.Rules))
	for k := range table {
		for s := range table[k] {
			for _, i := range table[k][s] {
				if i >= 0 {
					used[i] = true
				}
			}
		}
	}
	for i, r := range p.Rules {
		if !used[i] {
			return fmt.Errorf("rule %d (%s) never applies: the rules before it match every job it matches", i, r.Name)
		}
	}
	return nil
}

func (m *Match) matches(kind airlock.Kind, situation airlock.Situation, hermetic bool) bool {
	if len(m.Situations) > 0 && !contains(m.Situations, situation) {
		return false
	}
	if len(m.Kinds) > 0 && !contains(m.Kinds, kind) {
		return false
	}
	if m.Hermetic != nil && *m.Hermetic != hermetic {
		return false
	}
	return true
}

func contains[T comparable](list []T, v T) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}
