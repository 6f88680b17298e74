package tierset

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/testing/tiertest"
)

// TestGVisorBuilt builds the gVisor tier the way the CLI does and runs
// a command through it.
func TestGVisorBuilt(t *testing.T) {
	f := entry(t, "gvisor")
	t.Setenv("TMPDIR", t.TempDir()) // the tier's default directory
	tier, err := f.New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := tier.(io.Closer); ok {
		defer c.Close()
	}
	if err := tier.(airlock.Prober).Available(); err != nil {
		tiertest.Unavailable(t, "gvisor", err)
	}
	res, err := tier.Run(context.Background(), airlock.Job{Kind: airlock.KindCommand, Argv: []string{"sh", "-c", "echo hi; cat /proc/version"}, Grants: airlock.Grants{Spawn: true}})
	if err != nil || !strings.HasPrefix(res.Stdout, "hi\n") || !strings.Contains(res.Stdout, "gvisor") {
		t.Fatalf("%v (%+v)", err, res)
	}
	if _, err := f.New(Options{GVisorPool: -1}); err == nil {
		t.Fatal("a negative pool size was accepted")
	}
}
