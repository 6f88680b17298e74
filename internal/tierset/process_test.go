package tierset

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/testing/tiertest"
)

// TestProcessBuilt builds both process tiers the way the CLI does and
// runs a command through them.
func TestProcessBuilt(t *testing.T) {
	for _, name := range []string{"seccomp", "process"} {
		f := entry(t, name)
		t.Run(f.Name, func(t *testing.T) {
			// The tier's default directory, reachable by the level-2 sandbox's uid.
			tmp := t.TempDir()
			for _, d := range []string{tmp, filepath.Dir(tmp)} {
				if err := os.Chmod(d, 0o711); err != nil {
					t.Fatal(err)
				}
			}
			t.Setenv("TMPDIR", tmp)
			tier, err := f.New(Options{})
			if err != nil {
				t.Fatal(err)
			}
			if c, ok := tier.(io.Closer); ok {
				defer c.Close()
			}
			if err := tier.(airlock.Prober).Available(); err != nil {
				tiertest.Unavailable(t, f.Name, err)
			}
			res, err := tier.Run(context.Background(), airlock.Job{Kind: airlock.KindCommand, Argv: []string{"sh", "-c", "echo hi; id -u; ls /"}, Grants: airlock.Grants{Spawn: true}})
			if err != nil || !strings.HasPrefix(res.Stdout, "hi\n") {
				t.Fatalf("%v (%+v)", err, res)
			}
			if f.Name == "process" && (!strings.Contains(res.Stdout, "\n0\n") || !strings.Contains(res.Stdout, "scratch")) {
				t.Fatalf("the container does not show the sandbox view: %q", res.Stdout)
			}
		})
	}
	// The pool setting reaches the tier.
	pooled, err := entry(t, "process").New(Options{ProcessPool: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer pooled.(io.Closer).Close()
	if got := pooled.(airlock.Pooler).PoolStats().Size; got != 1 {
		t.Errorf("pool size %d, want 1", got)
	}
	if _, err := entry(t, "process").New(Options{ProcessPool: 65}); err == nil {
		t.Fatal("a pool size above 64 was accepted")
	}
}
