package gvisor

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/approve"
)

// TestPlacedCheck shows that an approval bound to a job's digest is
// re-checked over the files as placed, before the program starts, on every
// path: cold (the host scratch the sandbox mounts), pooled and session
// (the host staging directory whose bytes are handed to the agent). A job
// whose placed files differ from the approved ones is refused and runs
// nothing.
func TestPlacedCheck(t *testing.T) {
	const tenant = "acme"
	job := cmdJob("sh", "-c", "cat a/b.txt; echo ran")
	job.Files = map[string]string{"a/b.txt": "approved\n"}
	swapped := job
	swapped.Files = map[string]string{"a/b.txt": "swapped\n"}
	approved := approve.Of(&job, Name, tenant)

	// Each case returns a run function for the path under test.
	paths := map[string]func(t *testing.T) func(context.Context, airlock.Job) (airlock.Result, error){
		"cold": func(t *testing.T) func(context.Context, airlock.Job) (airlock.Result, error) {
			return newTier(t, NewConfig()).Run
		},
		"pooled": func(t *testing.T) func(context.Context, airlock.Job) (airlock.Result, error) {
			tier := newTier(t, NewConfig().WithPool(1, 1))
			return func(ctx context.Context, j airlock.Job) (airlock.Result, error) {
				warm(t, tier)
				hits := tier.Stats().Hits
				res, err := tier.Run(ctx, j)
				if tier.Stats().Hits != hits+1 {
					t.Fatalf("the job did not claim a pooled sandbox: %+v", tier.Stats())
				}
				return res, err
			}
		},
		"session": func(t *testing.T) func(context.Context, airlock.Job) (airlock.Result, error) {
			return openSession(t, airlock.SessionOptions{}).Run
		},
	}
	for name, open := range paths {
		t.Run(name, func(t *testing.T) {
			run := open(t)
			// The check sees the placed files before the program runs.
			var seen string
			peek := airlock.WithPlacedCheck(context.Background(), func(dir string) error {
				data, err := os.ReadFile(filepath.Join(dir, "a/b.txt"))
				seen = string(data)
				return err
			})
			if res, err := run(peek, job); err != nil || res.Stdout != "approved\nran\n" || seen != "approved\n" {
				t.Fatalf("check saw %q; run: %v %+v", seen, err, res)
			}
			// A job whose content differs from the approved one is refused
			// with approval_stale, and nothing runs.
			ctx := airlock.WithPlacedCheck(context.Background(), approve.PlacedCheck(swapped, Name, tenant, approved))
			res, err := run(ctx, swapped)
			if err == nil || !approve.IsStale(err) || res.Stdout != "" || res.ExitCode != 0 {
				t.Fatalf("swapped files: want approval_stale and no output, got %v %+v", err, res)
			}
			// The approved job itself passes the same check and runs (in a
			// session, in the same sandbox: the refusal did not end it).
			ctx = airlock.WithPlacedCheck(context.Background(), approve.PlacedCheck(job, Name, tenant, approved))
			if res, err := run(ctx, job); err != nil || res.Stdout != "approved\nran\n" {
				t.Fatalf("approved job: %v %+v", err, res)
			}
		})
	}
}
