package escalate

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/approve"
)

// Explanation says how the router decided, tier by tier.
type Explanation struct {
	Situation airlock.Situation `json:"situation"`
	Rule      string            `json:"rule,omitempty"`
	MinLevel  airlock.Level     `json:"min_level,omitempty"`
	Chosen    string            `json:"chosen,omitempty"`
	Refused   string            `json:"refused,omitempty"`
	Steps     []Step            `json:"tiers"`
}

// Step is the verdict on one tier, cheapest first.
type Step struct {
	Tier    string        `json:"tier"`
	Level   airlock.Level `json:"level"`
	Verdict string        `json:"verdict"` // chosen, passed over, not needed
	Reason  string        `json:"reason,omitempty"`
}

// Explain returns the router's reasoning for a job without running it.
func (r *Router) Explain(job *airlock.Job) Explanation {
	x := Explanation{Situation: situationOf(job)}
	ri, ti, _, err := r.route(job)
	if err != nil {
		x.Refused = err.Error()
	}
	if ri >= 0 {
		rule := r.policy.Rules[ri]
		x.Rule, x.MinLevel = rule.Name, rule.MinLevel
	}
	if ti >= 0 {
		x.Chosen = r.tiers[ti].name
	}
	explicit := job.Tier != "" && job.Tier != TierAuto
	for i, e := range r.tiers {
		s := Step{Tier: e.name, Level: e.level}
		switch {
		case i == ti:
			s.Verdict = "chosen"
			if explicit {
				s.Reason = "requested by the job"
			} else {
				s.Reason = "cheapest tier at or above the minimum that admits the job"
			}
		case ti >= 0 && i > ti && !explicit:
			s.Verdict = "not needed"
			s.Reason = "a cheaper tier was chosen"
		case ri < 0:
			s.Verdict = "passed over"
			s.Reason = "no rule applies"
		case explicit && e.name != job.Tier:
			s.Verdict = "passed over"
			// The job's own text, printed to a person: escaped.
			tier, _ := approve.Visible(job.Tier)
			s.Reason = "the job requested tier " + tier
		default:
			s.Verdict = "passed over"
			s.Reason = r.whyNot(ri, e, job)
		}
		x.Steps = append(x.Steps, s)
	}
	return x
}

func (r *Router) whyNot(ri int, e entry, job *airlock.Job) string {
	rule := r.policy.Rules[ri]
	switch {
	case e.level < rule.MinLevel:
		return fmt.Sprintf("level %d (%s) is below the minimum %d (%s) of rule %s", e.level, e.level, rule.MinLevel, rule.MinLevel, rule.Name)
	case len(rule.Tiers) > 0 && !contains(rule.Tiers, e.name):
		return fmt.Sprintf("rule %s allows only %v", rule.Name, rule.Tiers)
	case e.unavailable != nil:
		return "unavailable: " + e.unavailable.Error()
	}
	if err := e.admit(job); err != nil {
		return err.Error()
	}
	return "eligible"
}

// Lines renders the explanation as short reasons, for Result.Decision.
func (x Explanation) Lines() []string {
	var out []string
	if x.Rule != "" {
		out = append(out, fmt.Sprintf("rule %s: minimum level %d (%s)", x.Rule, x.MinLevel, x.MinLevel))
	}
	for _, s := range x.Steps {
		if s.Verdict == "not needed" {
			continue
		}
		out = append(out, fmt.Sprintf("%s: %s: %s", s.Tier, s.Verdict, s.Reason))
	}
	if x.Refused != "" {
		out = append(out, "refused: "+x.Refused)
	}
	return out
}

// Write prints the explanation as a table.
func (x Explanation) Write(w io.Writer) {
	fmt.Fprintf(w, "situation: %s\n", x.Situation)
	if x.Rule != "" {
		fmt.Fprintf(w, "rule:      %s (minimum level %d, %s)\n", x.Rule, x.MinLevel, x.MinLevel)
	}
	switch {
	case x.Chosen != "":
		fmt.Fprintf(w, "chosen:    %s\n", x.Chosen)
	case x.Refused != "":
		fmt.Fprintf(w, "refused:   %s\n", x.Refused)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIER\tLEVEL\tVERDICT\tREASON")
	for _, s := range x.Steps {
		fmt.Fprintf(tw, "%s\t%d %s\t%s\t%s\n", s.Tier, s.Level, s.Level, s.Verdict, s.Reason)
	}
	tw.Flush()
}
