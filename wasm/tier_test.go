package wasm

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/corpus"
	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
	"github.com/airlock-sandbox/airlock/internal/testing/tiertest"
)

// testCache makes the tests' tiers share compiled machine code on disk, so
// that each new tier does not compile the 3 MB Go test program again, and
// gives compiles the time a loaded CI machine (or -race) needs.
func testCache(cfg Config) Config {
	if cfg.cacheDir == "" {
		cfg = cfg.WithCacheDir(filepath.Join(buildDir, "cache"))
	}
	if cfg.compileTimeout == DefaultCompileTimeout {
		cfg = cfg.WithCompileTimeout(5 * time.Minute)
	}
	return cfg
}

func newTier(t testing.TB, cfg Config) *Tier {
	t.Helper()
	tier, err := New(testCache(cfg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tier.Close() })
	return tier
}

func TestConformance(t *testing.T) {
	tier := newTier(t, NewConfig())
	g := guest(t)
	spin := airlock.Job{Kind: airlock.KindWasm, Module: corpusWAT(t, "spin-function")}
	flood := airlock.Job{Kind: airlock.KindWasm, Module: g, Argv: []string{"flood"}}
	env := airlock.Job{Kind: airlock.KindWasm, Module: g, Argv: []string{"env", tiertest.CanaryEnv}}
	before := runtime.NumGoroutine()
	tiertest.Suite{
		Tier: tier,

		OK: airlock.Job{Kind: airlock.KindWasm, Module: g, Argv: []string{"hello"}},
		Check: func(t testing.TB, res airlock.Result) {
			if res.Stdout != "hello from wasm\n" {
				t.Errorf("stdout %q", res.Stdout)
			}
		},
		Spin:  &spin,
		Flood: &flood,
		Env:   &env,
	}.Run(t)
	tiertest.NoGoroutineLeak(t, before)
}

// caseTier fills in what a corpus case's job cannot carry: the module, and
// the runner's directory in grants.fs.read.
type caseTier struct {
	*Tier
	module []byte
	vars   map[string]string
}

func (c caseTier) Run(ctx context.Context, job airlock.Job) (airlock.Result, error) {
	job.Module = c.module
	for i, p := range job.Grants.FS.Read {
		for k, v := range c.vars {
			p = strings.ReplaceAll(p, "${"+k+"}", v)
		}
		job.Grants.FS.Read[i] = p
	}
	return c.Tier.Run(ctx, job)
}

func TestCorpus(t *testing.T) {
	cases, err := corpus.Load("wasm")
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) == 0 {
		t.Fatal("no wasm cases")
	}
	tier := newTier(t, NewConfig())
	g := guest(t)

	// The runner's canaries: a secret file, a planted variable, and a
	// granted directory with symlinks pointing out of it.
	base := t.TempDir()
	secret := "canary-secret-" + time.Now().Format("150405.000000000")
	canaryFile := filepath.Join(base, "secret")
	must(t, os.WriteFile(canaryFile, []byte(secret), 0o600))
	grant := filepath.Join(base, "granted")
	must(t, os.Mkdir(grant, 0o755))
	must(t, os.WriteFile(filepath.Join(grant, "ok.txt"), []byte("granted\n"), 0o644))
	must(t, os.Symlink("../secret", filepath.Join(grant, "rel-escape")))
	must(t, os.Symlink(canaryFile, filepath.Join(grant, "abs-escape")))
	envSecret := "canary-env-" + secret
	t.Setenv(tiertest.CanaryEnv, envSecret)
	vars := map[string]string{"CANARY_FILE": canaryFile, "CANARY_ENV": tiertest.CanaryEnv, "GRANT_DIR": grant}

	for _, c := range cases {
		if !c.Applies(Name) {
			continue
		}
		t.Run(strings.TrimPrefix(c.ID, "wasm/"), func(t *testing.T) {
			if why := c.SkipReason(vars); why != "" {
				testenv.Skipf(t, "%s", why)
			}
			mod := g
			if name, ok := caseWAT(strings.TrimPrefix(c.ID, "wasm/")); ok {
				mod = corpusWAT(t, name)
			}
			v := c.Run(context.Background(), caseTier{tier, mod, vars}, vars, secret, envSecret)
			t.Logf("%s: %s", v.Outcome, v.Detail)
			if !v.Pass {
				t.Errorf("%s (%s): outcome %s: %s", c.ID, c.Class, v.Outcome, v.Detail)
			}
		})
	}
	// The host is alive and still runs ordinary work after every attack.
	res, err := tier.Run(context.Background(), airlock.Job{Kind: airlock.KindWasm, Module: g, Argv: []string{"hello"}})
	if err != nil || res.Stdout != "hello from wasm\n" {
		t.Fatalf("after the corpus: %v %+v", err, res)
	}
	// Nothing was planted in the granted directory.
	if _, err := os.Lstat(filepath.Join(grant, "planted")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a guest created a file in a read-only grant: %v", err)
	}
}

// caseWAT finds the WAT module of case NAME: corpus/wasm/NAME.wat, or
// PREFIX.wat for a case named PREFIX-MORE (several cases can share one
// module).
func caseWAT(name string) (string, bool) {
	for {
		if _, err := os.Stat(filepath.Join("..", "corpus", "wasm", name+".wat")); err == nil {
			return name, true
		}
		i := strings.LastIndexByte(name, '-')
		if i < 0 {
			return "", false
		}
		name = name[:i]
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestStreamsOutput: the guest's first line reaches the sink while the
// guest waits for the file the test creates on seeing it.
func TestStreamsOutput(t *testing.T) {
	tier := newTier(t, NewConfig())
	dir := t.TempDir()
	gate := filepath.Join(dir, "open")
	job := airlock.Job{Kind: airlock.KindWasm, Module: guest(t), Argv: []string{"gate", gate}}
	job.Grants.FS.Read = []string{dir}
	job.Limits.WallMS = 60_000
	res := tiertest.Gated(t, tier, job, "first\n", func() {
		if err := os.WriteFile(gate, nil, 0o644); err != nil {
			t.Error(err)
		}
	})
	if res.Stdout != "first\nsecond\n" || res.Stderr != "note\n" {
		t.Fatalf("gated guest: %+v", res)
	}
}
