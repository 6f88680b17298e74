package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/airlock-sandbox/airlock/corpus"
	egresscases "github.com/airlock-sandbox/airlock/corpus/egress"
	"github.com/airlock-sandbox/airlock/corpus/runner/gatewaylab"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/internal/value"
)

// Suite runs an area whose cases are not jobs for a tier against the
// pseudo-tier they are written for: egress requests against a real proxy
// and resolver, documents through the real output sanitiser. Each case
// runs in a child like any other; parent and child must be given the same
// suites (the defaults are always there).
type Suite struct {
	// Name is the pseudo-tier, as the report shows it.
	Name string
	// Area is the area of its cases.
	Area string
	// Cases lists the cases.
	Cases func() ([]SuiteCase, error)
	// Run performs and judges one case, in the child. vars are the
	// runner's canaries.
	Run func(ctx context.Context, raw json.RawMessage, vars map[string]string) Judgement
}

// SuiteCase is one case of a suite, carried to the child as JSON.
type SuiteCase struct {
	ID    string
	Class corpus.Class
	Raw   json.RawMessage
}

// Judgement is what a suite's case did.
type Judgement struct {
	Outcome  string   `json:"outcome"`
	Pass     bool     `json:"pass"`
	Detail   string   `json:"detail,omitempty"`
	Evidence []string `json:"evidence,omitempty"`
}

// The default suites' pseudo-tiers.
const (
	EgressGateway = "egress-gateway"
	Sanitiser     = "sanitiser"
)

// DefaultSuites are the egress and output areas against the real gateway
// and sanitiser.
func DefaultSuites() []Suite {
	return []Suite{EgressSuite(EgressGateway, nil), OutputSuite(Sanitiser, egresscases.Sanitiser)}
}

// EgressSuite runs corpus/egress/egress.jsonl, each case against a fresh
// gatewaylab environment (a real gateway on loopback in front of real
// origins and an upstream resolver) whose config adjust may change: the
// origins are the sinks, and a refused request they saw is the evidence
// of an escape.
func EgressSuite(name string, adjust func(*egress.Config)) Suite {
	return Suite{
		Name: name, Area: "egress",
		Cases: func() ([]SuiteCase, error) {
			reqs, err := egresscases.Requests()
			return suiteCases(reqs, err, func(r egresscases.Request) (string, corpus.Class) { return r.ID, r.Class })
		},
		Run: decoded(func(c egresscases.Request) Judgement {
			env, err := gatewaylab.Start(adjust)
			if err != nil {
				return Judgement{Outcome: "error:internal", Detail: "starting the gateway: " + err.Error()}
			}
			defer env.Close()
			j := env.Run(c)
			out := Judgement{Outcome: j.Got, Pass: j.Pass(), Detail: j.Detail}
			if !out.Pass {
				out.Detail = strings.Join(j.Problems, "; ")
				for _, r := range j.Reached {
					out.Evidence = append(out.Evidence, "the origin saw "+r)
				}
			}
			return out
		}),
	}
}

// OutputSuite runs corpus/egress/output.jsonl through sanitise.
func OutputSuite(name string, sanitise egresscases.Sanitise) Suite {
	return Suite{
		Name: name, Area: "output",
		Cases: func() ([]SuiteCase, error) {
			docs, err := egresscases.Documents()
			return suiteCases(docs, err, func(d egresscases.Document) (string, corpus.Class) { return d.ID, d.Class })
		},
		Run: decoded(func(d egresscases.Document) Judgement {
			problems, out := d.Check(sanitise)
			if len(problems) == 0 {
				return Judgement{Outcome: "sanitised", Pass: true}
			}
			return Judgement{Outcome: "unsafe", Detail: strings.Join(problems, "; "), Evidence: []string{fmt.Sprintf("output %q", value.Clip(out, 200))}}
		}),
	}
}

// decoded is a suite's Run for cases of type T, decoded from the spec.
func decoded[T any](judge func(T) Judgement) func(context.Context, json.RawMessage, map[string]string) Judgement {
	return func(_ context.Context, raw json.RawMessage, _ map[string]string) Judgement {
		var c T
		if err := json.Unmarshal(raw, &c); err != nil {
			return Judgement{Outcome: "error:invalid", Detail: err.Error()}
		}
		return judge(c)
	}
}

func suiteCases[T any](list []T, err error, meta func(T) (string, corpus.Class)) ([]SuiteCase, error) {
	if err != nil {
		return nil, err
	}
	out := make([]SuiteCase, 0, len(list))
	for _, c := range list {
		raw, err := json.Marshal(c)
		if err != nil {
			return nil, err
		}
		id, class := meta(c)
		out = append(out, SuiteCase{ID: id, Class: class, Raw: raw})
	}
	return out, nil
}

// withSuites is the default suites plus extra; an extra suite replaces a
// default one of the same name.
func withSuites(extra []Suite) []Suite {
	out := DefaultSuites()
	for _, s := range extra {
		replaced := false
		for i := range out {
			if out[i].Name == s.Name {
				out[i], replaced = s, true
			}
		}
		if !replaced {
			out = append(out, s)
		}
	}
	return out
}
