package setup

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/testing/tiertest"
)

// TestGVisorRegistered builds the gVisor tier the way the CLI does and runs
// the acceptance command through it.
func TestGVisorRegistered(t *testing.T) {
	var f *Factory
	for _, c := range Factories() {
		if c.Name == "gvisor" {
			f = &c
		}
	}
	if f == nil || f.Order != 60 {
		t.Fatalf("gvisor factory missing or misordered: %+v", f)
	}
	t.Setenv("AIRLOCK_GVISOR_POOL", "")
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
	res, err := tier.Run(context.Background(), airlock.Job{Kind: airlock.KindCommand, Argv: []string{"sh", "-c", "echo hi; cat /proc/version"}})
	if err != nil || !strings.HasPrefix(res.Stdout, "hi\n") || !strings.Contains(res.Stdout, "gvisor") {
		t.Fatalf("%v (%+v)", err, res)
	}
	t.Setenv("AIRLOCK_GVISOR_POOL", "many")
	if _, err := f.New(Options{}); err == nil {
		t.Fatal("a malformed pool size was accepted")
	}
}
