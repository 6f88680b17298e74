// Package mcpwrap relays an MCP server that runs attached in a sandbox to
// the agent's client (airlock mcp-wrap): it relays tools under a per-tool
// policy, and prompts and listed resources when the policy allows, binds
// approvals to a call's exact arguments, treats every result as untrusted
// (sanitised, capped) and logs each call and decision.
package mcpwrap

import (
	"bytes"
	"fmt"
	"os"

	"gopkg.in/yaml.v3"
)

// Policy is the per-tool policy, as data (YAML or JSON). The zero value
// allows every tool with the default argument limit and no rate limit.
type Policy struct {
	// Default is "allow" (or empty) or "deny": what a tool not named in
	// Tools gets.
	Default string `yaml:"default" json:"default,omitempty"`
	// MaxArgsBytes bounds a call's arguments, as JSON (0: 64 KiB).
	MaxArgsBytes int `yaml:"max_args_bytes" json:"max_args_bytes,omitempty"`
	// Tools are the rules by tool name.
	Tools map[string]Rule `yaml:"tools" json:"tools,omitempty"`
	// Refuse are patterns refused in every tool's arguments, by argument
	// name ("*": every string anywhere in the arguments). A pattern is a
	// glob ("**/.ssh/**", "*.pem") or, prefixed "re:", a regular
	// expression.
	Refuse map[string][]string `yaml:"refuse" json:"refuse,omitempty"`
	// PathArgs name the arguments of every tool that are paths: each must
	// resolve under Roots.
	PathArgs []string `yaml:"path_args" json:"path_args,omitempty"`
	// Roots are the directories, as the host sees them, confined path
	// arguments must resolve under.
	Roots []string `yaml:"roots" json:"roots,omitempty"`
	// Prompts and Resources are "allow" or "deny": whether the wrapped
	// server's prompts and listed resources are relayed (empty: as
	// Default). Their text passes the sanitiser and the result cap, and
	// a prompt's arguments the size limit and the refused patterns.
	Prompts   string `yaml:"prompts" json:"prompts,omitempty"`
	Resources string `yaml:"resources" json:"resources,omitempty"`
}

// Rule is one tool's policy.
type Rule struct {
	// Allow overrides the policy's default for this tool.
	Allow *bool `yaml:"allow" json:"allow,omitempty"`
	// Approval: a call is relayed only with an approval token bound to the
	// tool and its exact arguments.
	Approval bool `yaml:"approval" json:"approval,omitempty"`
	// MaxArgsBytes overrides the policy's argument limit.
	MaxArgsBytes int `yaml:"max_args_bytes" json:"max_args_bytes,omitempty"`
	// RatePerMinute bounds calls of the tool (0: no bound); a call past it
	// is refused, not queued.
	RatePerMinute int `yaml:"rate_per_minute" json:"rate_per_minute,omitempty"`
	// Refuse adds refused patterns for this tool's arguments.
	Refuse map[string][]string `yaml:"refuse" json:"refuse,omitempty"`
	// PathArgs adds confined path arguments for this tool.
	PathArgs []string `yaml:"path_args" json:"path_args,omitempty"`
	// Roots, when set, replace the policy's roots for this tool.
	Roots []string `yaml:"roots" json:"roots,omitempty"`
}

// DefaultMaxArgsBytes is the argument limit when a policy sets none.
const DefaultMaxArgsBytes = 64 << 10

// LoadPolicy reads a policy file; unknown fields are errors.
func LoadPolicy(path string) (Policy, error) {
	var p Policy
	data, err := os.ReadFile(path)
	if err != nil {
		return p, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&p); err != nil {
		return p, fmt.Errorf("tool policy %s: %w", path, err)
	}
	return p, p.Validate()
}

// Validate checks the policy's values.
func (p Policy) Validate() error {
	for _, f := range []struct{ name, v string }{{"default", p.Default}, {"prompts", p.Prompts}, {"resources", p.Resources}} {
		if f.v != "" && f.v != "allow" && f.v != "deny" {
			return fmt.Errorf("tool policy: %s %q: want allow or deny", f.name, f.v)
		}
	}
	if p.MaxArgsBytes < 0 {
		return fmt.Errorf("tool policy: max_args_bytes must not be negative")
	}
	for name, r := range p.Tools {
		if r.MaxArgsBytes < 0 || r.RatePerMinute < 0 {
			return fmt.Errorf("tool policy: %s: limits must not be negative", name)
		}
	}
	_, _, err := p.compileArgs()
	return err
}

// compileArgs compiles the argument rules of every tool the policy names,
// and of the others.
func (p *Policy) compileArgs() (map[string]*argRules, *argRules, error) {
	def, err := compileArgs(p, Rule{}, "tool policy")
	if err != nil {
		return nil, nil, err
	}
	byTool := map[string]*argRules{}
	for name, r := range p.Tools {
		if byTool[name], err = compileArgs(p, r, "tool policy: "+name); err != nil {
			return nil, nil, err
		}
	}
	return byTool, def, nil
}

// allowed reports whether the tool may be listed and called at all.
func (p *Policy) allowed(tool string) bool {
	if r, ok := p.Tools[tool]; ok && r.Allow != nil {
		return *r.Allow
	}
	return p.Default != "deny"
}

// relays reports whether prompts or resources, set to v, are relayed.
func (p *Policy) relays(v string) bool {
	if v != "" {
		return v == "allow"
	}
	return p.Default != "deny"
}

// maxArgs is the tool's argument limit.
func (p *Policy) maxArgs(tool string) int {
	if r := p.Tools[tool]; r.MaxArgsBytes > 0 {
		return r.MaxArgsBytes
	}
	if p.MaxArgsBytes > 0 {
		return p.MaxArgsBytes
	}
	return DefaultMaxArgsBytes
}
