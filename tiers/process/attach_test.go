package process

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/testing/tiertest"
)

// TestAttach: on both tiers, an attached shell without the spawn grant
// answers each line as it arrives; closing stdin ends it; a second one
// that never ends is killed; nothing is left in the base directory.
func TestAttach(t *testing.T) {
	for _, tc := range bothTiers {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			tier := newTestTier(t, tc, cfg)
			job := airlock.Job{Kind: airlock.KindCommand, Argv: []string{"sh", "-c", `while read l; do echo "got $l"; done; echo bye >&2; exit 3`}}
			a, err := tier.Attach(context.Background(), job)
			if err != nil {
				t.Fatal(err)
			}
			out := bufio.NewReader(a.Stdout())
			for i := range 3 {
				if _, err := fmt.Fprintf(a.Stdin(), "line %d\n", i); err != nil {
					t.Fatal(err)
				}
				got, err := out.ReadString('\n')
				if err != nil || got != fmt.Sprintf("got line %d\n", i) {
					res, werr := a.Wait()
					t.Fatalf("answer %d: %q, %v; the job ended: %+v, %v", i, got, err, res, werr)
				}
			}
			if err := a.Stdin().Close(); err != nil {
				t.Fatal(err)
			}
			if rest, err := io.ReadAll(out); err != nil || len(rest) != 0 {
				t.Fatalf("after EOF: %q, %v", rest, err)
			}
			res, err := a.Wait()
			if err != nil || res.ExitCode != 3 || res.Stderr != "bye\n" {
				t.Errorf("result: exit %d, stderr %q, %v", res.ExitCode, res.Stderr, err)
			}

			a, err = tier.Attach(context.Background(), airlock.Job{Kind: airlock.KindCommand, Argv: []string{"sh", "-c", `echo up; while :; do echo flood; done`}, Limits: airlock.Limits{OutputBytes: 64 << 20}})
			if err != nil {
				t.Fatal(err)
			}
			if line, err := bufio.NewReader(a.Stdout()).ReadString('\n'); err != nil || line != "up\n" {
				t.Fatalf("first line %q, %v", line, err)
			}
			a.Kill()
			_, err = a.Wait()
			var stop *airlock.Stop
			if !errors.As(err, &stop) || stop.Reason != airlock.StopKilled {
				t.Fatalf("Wait after Kill: %v", err)
			}
			tier.Close()
			if entries := sandboxLeftovers(cfg.baseDir); len(entries) > 0 {
				t.Errorf("left behind: %v", entries)
			}
		})
	}
}

// TestAttachPooled: on the container tier (the one with a pool), an
// attached job claims a pooled sandbox as Run would (see
// tiertest.AttachPooled).
func TestAttachPooled(t *testing.T) {
	tiertest.AttachPooled(t, newTestTier(t, bothTiers[0], testConfig(t).WithPool(1)))
}
