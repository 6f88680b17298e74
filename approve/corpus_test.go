package approve_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/corpus"
	"github.com/airlock-sandbox/airlock/internal/testing/tiertest"
	"github.com/airlock-sandbox/airlock/internal/tierset"
)

// TestCorpusApproval runs corpus/approval.jsonl through the approval gate
// (corpus.Case.Exec: approve.Signer.Authorize, then the tier's placed-files
// check) on the process tier and the Starlark tier; `airlock corpus` runs
// the same cases on every tier they name.
func TestCorpusApproval(t *testing.T) {
	cases, err := corpus.Load("approval")
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) < 12 {
		t.Fatalf("only %d approval cases", len(cases))
	}
	dir := t.TempDir()
	secret := "approval-canary-secret"
	vars := map[string]string{"CANARY_FILE": filepath.Join(dir, "secret"), "GRANT_DIR": filepath.Join(dir, "granted")}
	if err := os.WriteFile(vars["CANARY_FILE"], []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(vars["GRANT_DIR"], 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(vars["GRANT_DIR"], "ok.txt"), []byte("granted\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, f := range tierset.Entries() {
		if f.Name != "process" && f.Name != "starlark" {
			continue
		}
		t.Run(f.Name, func(t *testing.T) {
			tier, err := f.New(tierset.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if c, ok := tier.(interface{ Close() error }); ok {
				defer c.Close()
			}
			if p, ok := tier.(airlock.Prober); ok {
				if err := p.Available(); err != nil {
					tiertest.Unavailable(t, f.Name, err)
				}
			}
			n := 0
			for _, c := range cases {
				if !slices.Contains(c.Tiers, f.Name) {
					continue
				}
				n++
				t.Run(c.ID, func(t *testing.T) {
					if v := c.Run(context.Background(), tier, vars, secret); !v.Pass {
						t.Errorf("%s (%s): %s: %s", c.ID, c.Class, v.Outcome, v.Detail)
					}
				})
			}
			if n < 4 {
				t.Errorf("only %d approval cases for %s", n, f.Name)
			}
		})
	}
}
