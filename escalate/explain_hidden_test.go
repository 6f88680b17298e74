package escalate_test

import (
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock"
)

// TestExplainEscapesTheJobsTier: the one piece of a job an explanation
// quotes, a requested tier, reaches the reader escaped (airlock explain,
// the MCP explain tool and Result.Decision print these lines).
func TestExplainEscapesTheJobsTier(t *testing.T) {
	r := newRouter(t, nil)
	job := airlock.Job{Kind: "command", Argv: []string{"true"}, Situation: "internal", Tier: "gvisor\u202e\x1b[2J"}
	x := r.Explain(&job)
	var b strings.Builder
	x.Write(&b)
	for _, out := range []string{strings.Join(x.Lines(), "\n"), b.String()} {
		if strings.ContainsAny(out, "\u202e\x1b") || !strings.Contains(out, `gvisor\u202e\x1b[2J`) {
			t.Errorf("the requested tier is not escaped:\n%s", out)
		}
	}
}
