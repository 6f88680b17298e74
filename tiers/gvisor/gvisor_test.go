package gvisor

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/tiers/tiertest"
)

// newTier builds a tier in a directory of the test's own, skipping (or,
// under CI, failing) when gVisor cannot run here. The tier is closed and
// checked for leftovers when the test ends.
func newTier(t testing.TB, cfg Config) *Tier {
	t.Helper()
	dir := t.TempDir()
	tier, err := New(cfg.WithDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	if err := tier.Available(); err != nil {
		tiertest.Unavailable(t, Name, err)
	}
	t.Cleanup(func() {
		tier.Close()
		checkNoLeftovers(t, tier)
	})
	return tier
}

// checkNoLeftovers fails if the tier left a sandbox, a sandbox directory or
// a cgroup behind.
func checkNoLeftovers(t testing.TB, tier *Tier) {
	t.Helper()
	if out, err := tier.runscOut(context.Background(), "list", "-quiet"); err != nil {
		t.Errorf("runsc list: %v", err)
	} else if s := strings.TrimSpace(string(out)); s != "" {
		t.Errorf("sandboxes left running: %s", s)
	}
	if entries, _ := os.ReadDir(filepath.Join(tier.base, "sb")); len(entries) > 0 {
		t.Errorf("%d sandbox directories left behind", len(entries))
	}
	prefix := idPrefix + itoa(os.Getpid()) + "-"
	hier, _ := os.ReadDir(cgroupRoot)
	for _, h := range hier {
		groups, _ := os.ReadDir(filepath.Join(cgroupRoot, h.Name()))
		for _, g := range groups {
			if strings.HasPrefix(g.Name(), prefix) {
				t.Errorf("cgroup left behind: %s/%s", h.Name(), g.Name())
			}
		}
	}
}

func cmdJob(argv ...string) airlock.Job {
	return airlock.Job{Kind: airlock.KindCommand, Argv: argv}
}

func TestSmoke(t *testing.T) {
	tier := newTier(t, NewConfig())
	res, err := tier.Run(context.Background(), cmdJob("sh", "-c", "echo hi; cat /proc/version; id; pwd"))
	t.Logf("%+v %v", res, err)
}
