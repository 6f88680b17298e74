package egress

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"gopkg.in/yaml.v3"

	"github.com/airlock-sandbox/airlock"
)

// ParseRules reads a policy file: a JSON or YAML list of rules in the
// grants.net shape ({host, methods, ports, scheme, paths}). Unknown fields
// are errors.
// The rules are compiled (and so checked) by [NewPolicy] or [Start].
func ParseRules(data []byte) ([]airlock.NetRule, error) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return nil, fmt.Errorf("empty policy (want a JSON or YAML list of rules)")
	}
	var rules []airlock.NetRule
	if trimmed[0] == '[' {
		dec := json.NewDecoder(bytes.NewReader(trimmed))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&rules); err != nil {
			return nil, fmt.Errorf("policy: %w", err)
		}
		if _, err := dec.Token(); err != io.EOF {
			return nil, fmt.Errorf("policy: trailing data after the list")
		}
		return rules, nil
	}
	var yrules []struct {
		Host    string   `yaml:"host"`
		Methods []string `yaml:"methods"`
		Ports   []int    `yaml:"ports"`
		Scheme  string   `yaml:"scheme"`
		Paths   []string `yaml:"paths"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(trimmed))
	dec.KnownFields(true)
	if err := dec.Decode(&yrules); err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	for _, r := range yrules {
		rules = append(rules, airlock.NetRule{Host: r.Host, Methods: r.Methods, Ports: r.Ports, Scheme: r.Scheme, Paths: r.Paths})
	}
	return rules, nil
}
