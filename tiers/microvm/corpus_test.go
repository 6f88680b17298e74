package microvm

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/corpus"
	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
)

// TestCorpus runs the microvm cases and the command cases every OS-backed
// tier shares, against snapshot-restored VMs.
func TestCorpus(t *testing.T) {
	tier := shared.get(t, WarmSnapshot)
	cases, err := corpus.Load("microvm", "command")
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) == 0 {
		t.Fatal("no corpus cases")
	}
	fileSecret := "canary-secret-file-7f3a91"
	base := t.TempDir()
	canaryFile := filepath.Join(base, "secret")
	if err := os.WriteFile(canaryFile, []byte(fileSecret), 0o644); err != nil {
		t.Fatal(err)
	}
	// The directory cases may grant, as the corpus runner makes it.
	grant := filepath.Join(base, "granted")
	must(t, os.Mkdir(grant, 0o755))
	must(t, os.WriteFile(filepath.Join(grant, "ok.txt"), []byte("granted\n"), 0o644))
	must(t, os.Symlink("../secret", filepath.Join(grant, "rel-escape")))
	must(t, os.Symlink(canaryFile, filepath.Join(grant, "abs-escape")))
	envSecret := "canary-secret-env-2b8c44"
	t.Setenv("AIRLOCK_CORPUS_CANARY", envSecret)
	var hits atomic.Int64
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer sink.Close()
	static := corpus.StaticBinaryB64()
	if static == "" {
		t.Fatal("cannot build the static Go binary the corpus needs (no Go toolchain?)")
	}
	vars := map[string]string{"CANARY_FILE": canaryFile, "GRANT_DIR": grant, "CANARY_ENV": "AIRLOCK_CORPUS_CANARY", "CANARY_URL": sink.URL, "STATIC_BINARY_B64": static}
	for _, c := range cases {
		if !c.Applies(Name) {
			continue
		}
		t.Run(c.ID, func(t *testing.T) {
			if why := c.SkipReason(vars); why != "" {
				testenv.Skipf(t, "%s", why)
			}
			v := c.Run(context.Background(), grantsTier{tier, vars}, vars, fileSecret, envSecret)
			if !v.Pass {
				t.Fatalf("%s (%s): %s: %s", c.ID, c.Class, v.Outcome, v.Detail)
			}
		})
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the loopback canary URL was hit %d times", n)
	}
}

// grantsTier fills in the runner's directory in grants.fs.read, which a
// corpus case's job cannot carry (as the corpus runner does).
type grantsTier struct {
	*Tier
	vars map[string]string
}

func (g grantsTier) Run(ctx context.Context, job airlock.Job) (airlock.Result, error) {
	for i, p := range job.Grants.FS.Read {
		for k, v := range g.vars {
			p = strings.ReplaceAll(p, "${"+k+"}", v)
		}
		job.Grants.FS.Read[i] = p
	}
	return g.Tier.Run(ctx, job)
}
