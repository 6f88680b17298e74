package starlark_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/airlock-sandbox/airlock/corpus"
	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
)

// TestCorpus runs every starlark case in this process: a crasher that got
// through would take the test binary down with it.
func TestCorpus(t *testing.T) {
	cases, err := corpus.Load("starlark")
	require.NoError(t, err)
	require.NotEmpty(t, cases)

	secret := fmt.Sprintf("canary-secret-%d", time.Now().UnixNano())
	file := filepath.Join(t.TempDir(), "canary.star")
	require.NoError(t, os.WriteFile(file, []byte("x = \""+secret+"\"\n"), 0o600))
	t.Setenv("AIRLOCK_CORPUS_CANARY", secret)
	vars := map[string]string{"CANARY_FILE": file, "CANARY_ENV": "AIRLOCK_CORPUS_CANARY"}

	tier := newTier(t)
	for _, c := range cases {
		if !c.Applies(tier.Name()) {
			continue
		}
		t.Run(c.ID, func(t *testing.T) {
			if why := c.SkipReason(vars); why != "" {
				testenv.Skipf(t, "%s", why)
			}
			start := time.Now()
			v := c.Run(context.Background(), tier, vars, secret)
			if !v.Pass {
				t.Fatalf("%s (%s): %s", c.ID, v.Outcome, v.Detail)
			}
			t.Logf("%s in %v", v.Outcome, time.Since(start).Round(time.Millisecond))
		})
	}
}
