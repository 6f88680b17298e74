package setup

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

// TestProcessRegistered builds both process tiers the way the CLI does and
// runs the acceptance command through them.
func TestProcessRegistered(t *testing.T) {
	want := map[string]int{"seccomp": 40, "process": 50}
	for _, f := range Factories() {
		order, ok := want[f.Name]
		if !ok {
			continue
		}
		delete(want, f.Name)
		if f.Order != order {
			t.Errorf("%s registered with order %d, want %d", f.Name, f.Order, order)
		}
		t.Run(f.Name, func(t *testing.T) {
			t.Setenv("AIRLOCK_PROCESS_POOL", "")
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
			res, err := tier.Run(context.Background(), airlock.Job{Kind: airlock.KindCommand, Argv: []string{"sh", "-c", "echo hi; id -u; ls /"}})
			if err != nil || !strings.HasPrefix(res.Stdout, "hi\n") {
				t.Fatalf("%v (%+v)", err, res)
			}
			if f.Name == "process" && (!strings.Contains(res.Stdout, "\n0\n") || !strings.Contains(res.Stdout, "scratch")) {
				t.Fatalf("the container does not show the sandbox view: %q", res.Stdout)
			}
		})
	}
	if len(want) > 0 {
		t.Fatalf("not registered: %v", want)
	}
	t.Setenv("AIRLOCK_PROCESS_POOL", "many")
	for _, f := range Factories() {
		if f.Name == "process" {
			if _, err := f.New(Options{}); err == nil {
				t.Fatal("a malformed pool size was accepted")
			}
		}
	}
}
