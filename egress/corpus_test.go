package egress_test

import (
	"net/url"
	"strings"
	"testing"

	egresscases "github.com/airlock-sandbox/airlock/corpus/egress"
	"github.com/airlock-sandbox/airlock/corpus/runner/gatewaylab"
	"github.com/airlock-sandbox/airlock/egress"
)

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}

// newTestEnv is the corpus's environment (gatewaylab), stopped when the
// test ends; extra adjusts the gateway's config before it starts.
func newTestEnv(t testing.TB, extra func(*egress.Config)) *gatewaylab.Env {
	t.Helper()
	env, err := gatewaylab.Start(extra)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Close)
	return env
}

// TestCorpusEgress runs every case of corpus/egress/egress.jsonl against a
// real proxy, resolver, origins and upstream on loopback, judged by
// gatewaylab (the code `airlock corpus` runs them with too).
func TestCorpusEgress(t *testing.T) {
	cases, err := egresscases.Requests()
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) < 40 {
		t.Fatalf("only %d egress cases loaded", len(cases))
	}
	env := newTestEnv(t, nil)
	for _, c := range cases {
		t.Run(strings.TrimPrefix(c.ID, "egress/"), func(t *testing.T) {
			if j := env.Run(c); !j.Pass() {
				t.Errorf("%s: %s\nrationale: %s\nreached: %v", c.ID, strings.Join(j.Problems, "; "), c.Rationale, j.Reached)
			}
		})
	}
}
