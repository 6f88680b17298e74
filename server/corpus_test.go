package server_test

import (
	"context"
	"testing"

	"github.com/airlock-sandbox/airlock/corpus"
	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
)

func TestCorpus(t *testing.T) {
	f := newFixture(t)
	cases, err := corpus.Load("server")
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) < 10 {
		t.Fatalf("only %d server cases", len(cases))
	}
	tier := httpTier{f: f, key: keyB}
	for _, c := range cases {
		t.Run(c.ID, func(t *testing.T) {
			if why := c.SkipReason(nil); why != "" {
				testenv.Skipf(t, "%s", why)
			}
			if !c.Applies(tier.Name()) {
				t.Fatalf("%s is not marked for the server (tiers: [\"server\"]), so tier runners would run it", c.ID)
			}
			if v := c.Run(context.Background(), tier, nil); !v.Pass {
				t.Errorf("%s (%s): %s: %s", c.ID, c.Class, v.Outcome, v.Detail)
			}
		})
	}
}
