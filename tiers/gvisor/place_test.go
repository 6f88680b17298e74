package gvisor

import (
	"context"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/approve"
)

// TestSessionPlacementNeverFollowsLinks: a session's scratch outlives its
// jobs, so an earlier job can leave a link (or a hard link, or a special
// file) where a later job's file goes. The agent placing that file must
// refuse the run before anything is written rather than write through it.
// With an approval the host's placed-files check passes (it sees the
// files in a fresh staging directory, not the sandbox's scratch), so the
// agent's refusal is all there is.
func TestSessionPlacementNeverFollowsLinks(t *testing.T) {
	cases := []struct {
		name  string
		setup string // the earlier job's shell command
		place string // the file the later job places
		want  string // what the refused placement must say
		after string // a later job's command whose output must be "intact\n"
	}{
		{"link to a file in the scratch", "echo intact > run.sh; ln -s run.sh data.txt", "data.txt", "symbolic link", "cat run.sh"},
		{"link as a parent directory", "mkdir real; echo intact > real/x.txt; ln -s real lib", "lib/x.txt", "symbolic link", "cat real/x.txt"},
		{"dangling link", "ln -s made.txt data.txt", "data.txt", "symbolic link", "test -e made.txt || echo intact"},
		{"link to a file outside", "echo intact > /tmp/outside.txt; ln -s /tmp/outside.txt data.txt", "data.txt", "symbolic link", "cat /tmp/outside.txt"},
		{"link to a directory outside", "mkdir /tmp/out; ln -s /tmp/out lib", "lib/x.txt", "symbolic link", "test -e /tmp/out/x.txt || echo intact"},
		{"hard link", "echo intact > run.sh; ln run.sh data.txt", "data.txt", "hard link", "cat run.sh"},
		{"fifo", "mkfifo data.txt", "data.txt", "not a regular file", "test -p data.txt && echo intact"},
		{"file as a parent directory", "echo intact > lib", "lib/x.txt", "not a directory", "cat lib"},
	}
	tier := newTier(t, NewConfig())
	ctx := context.Background()
	for _, c := range cases {
		for _, approved := range []bool{false, true} {
			name := c.name
			if approved {
				name += "/approved"
			}
			t.Run(name, func(t *testing.T) {
				s, err := tier.OpenSession(ctx, airlock.SessionOptions{})
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				if res, err := s.Run(ctx, cmdJob("sh", "-c", c.setup)); err != nil || res.ExitCode != 0 {
					t.Fatalf("setting up: %v %+v", err, res)
				}
				// aa.txt sorts first: a refused placement must not have
				// written it either.
				job := cmdJob("sh", "-c", "echo RAN")
				job.Files = map[string]string{"aa.txt": "PLANTED\n", c.place: "PLANTED\n"}
				run := ctx
				if approved {
					run = airlock.WithPlacedCheck(ctx, approve.PlacedCheck(job, Name, "t", approve.Of(&job, Name, "t")))
				}
				res, err := s.Run(run, job)
				if err == nil || !strings.Contains(err.Error(), "placing file "+c.place+": ") || !strings.Contains(err.Error(), c.want) {
					t.Errorf("placing %s: want a refusal naming it (%q), got %v", c.place, c.want, err)
				}
				t.Logf("refused: %v", err)
				if strings.Contains(res.Stdout, "RAN") {
					t.Errorf("the refused job ran: %+v", res)
				}
				// An agent that reports an error ends the session with its
				// sandbox (scratch, /tmp and all); while it lives, what the
				// link pointed at is intact and nothing else was placed.
				res, err = s.Run(ctx, cmdJob("sh", "-c", c.after+"; test -e aa.txt && echo aa.txt was placed; true"))
				switch {
				case sessionEnded(err):
					t.Logf("the refusal ended the session: %v", err)
				case err != nil || res.Stdout != "intact\n":
					t.Errorf("after the refusal: want \"intact\\n\", got %q (%v)", res.Stdout, err)
				}
			})
		}
	}

	// The benign control: a later job overwrites the regular files an
	// earlier one placed, at the top and in a directory, with and without
	// an approval.
	t.Run("overwrite placed files", func(t *testing.T) {
		s, err := tier.OpenSession(ctx, airlock.SessionOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		for _, v := range []string{"one", "two", "three"} {
			job := cmdJob("sh", "-c", "cat data.txt lib/x.txt")
			job.Files = map[string]string{"data.txt": v + "\n", "lib/x.txt": v + "-x\n"}
			run := ctx
			if v == "three" {
				run = airlock.WithPlacedCheck(ctx, approve.PlacedCheck(job, Name, "t", approve.Of(&job, Name, "t")))
			}
			if res, err := s.Run(run, job); err != nil || res.Stdout != v+"\n"+v+"-x\n" {
				t.Fatalf("placing %s: %v %+v", v, err, res)
			}
		}
	})
}
