package process

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/approve"
)

// TestSessionPlacementNeverFollowsLinks: a session's scratch outlives its
// jobs, so an earlier job can leave a link (or a hard link, or a special
// file) where a later job's file goes. Placing that file must refuse the
// run before anything is written: not write through the link and leave
// the placed-files check to notice afterwards. The target keeps its
// content, and no other file of the refused job appears.
func TestSessionPlacementNeverFollowsLinks(t *testing.T) {
	outside, err := os.MkdirTemp("", "airlock-place-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(outside)
	// Reachable and writable for a level-2 sandbox's uid, so that only the
	// placement's refusal keeps it unchanged.
	if err := os.Chmod(outside, 0o777); err != nil {
		t.Fatal(err)
	}
	outsideFile := filepath.Join(outside, "outside.txt")

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
		{"link to a file outside", "ln -s " + outsideFile + " data.txt", "data.txt", "symbolic link", "echo intact"},
		{"link to a directory outside", "ln -s " + outside + " lib", "lib/outside.txt", "symbolic link", "echo intact"},
		{"hard link", "echo intact > run.sh; ln run.sh data.txt", "data.txt", "hard link", "cat run.sh"},
		{"directory", "mkdir data.txt", "data.txt", "not a regular file", "test -d data.txt && echo intact"},
		{"file as a parent directory", "echo intact > lib", "lib/x.txt", "not a directory", "cat lib"},
	}
	// (No FIFO: both levels refuse mknod, so no job can leave one;
	// internal/place's own tests cover it.)
	// Each placement happens with and without a placed-files check: with
	// an approval, the check must never be the first to notice.
	checks := map[string]func(job airlock.Job) context.Context{
		"unchecked": func(airlock.Job) context.Context { return context.Background() },
		"approved": func(job airlock.Job) context.Context {
			return airlock.WithPlacedCheck(context.Background(), approve.PlacedCheck(job, NameContainer, "t", approve.Of(&job, NameContainer, "t")))
		},
	}
	forBothTiers(t, func(t *testing.T, tier *Tier, cfg Config) {
		ctx := context.Background()
		for _, c := range cases {
			for check, withCheck := range checks {
				t.Run(c.name+"/"+check, func(t *testing.T) {
					if err := os.WriteFile(outsideFile, []byte("intact\n"), 0o666); err != nil {
						t.Fatal(err)
					}
					s, err := tier.OpenSession(ctx, airlock.SessionOptions{})
					if err != nil {
						t.Fatal(err)
					}
					defer s.Close()
					if res, err := s.Run(ctx, cmdJob("sh", "-c", c.setup)); err != nil || res.ExitCode != 0 {
						t.Fatalf("setting up: %v %+v", err, res)
					}
					// aa.txt sorts first: a placement that is refused must
					// not have written it either.
					job := cmdJob("sh", "-c", "echo RAN")
					job.Files = map[string]string{"aa.txt": "PLANTED\n", c.place: "PLANTED\n"}
					res, err := s.Run(withCheck(job), job)
					if err == nil || !strings.Contains(err.Error(), "placing file "+c.place+": ") || !strings.Contains(err.Error(), c.want) {
						t.Errorf("placing %s: want a refusal naming it (%q), got %v", c.place, c.want, err)
					}
					t.Logf("refused: %v", err)
					if strings.Contains(res.Stdout, "RAN") {
						t.Errorf("the refused job ran: %+v", res)
					}
					res, err = s.Run(ctx, cmdJob("sh", "-c", c.after+"; test -e aa.txt && echo aa.txt was placed; true"))
					if err != nil || res.Stdout != "intact\n" {
						t.Errorf("after the refusal: want \"intact\\n\", got %q (%v)", res.Stdout, err)
					}
					if data, err := os.ReadFile(outsideFile); err != nil || string(data) != "intact\n" {
						t.Errorf("the file outside the scratch holds %q (%v)", data, err)
					}
					if _, err := os.Stat(filepath.Join(outside, "aa.txt")); err == nil {
						t.Error("a job file was written outside the scratch")
					}
				})
			}
		}

		// The benign control: a later job overwrites the regular files an
		// earlier one placed, at the top and in a directory.
		t.Run("overwrite placed files", func(t *testing.T) {
			s, err := tier.OpenSession(ctx, airlock.SessionOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			for _, v := range []string{"one", "two"} {
				job := cmdJob("sh", "-c", "cat data.txt lib/x.txt")
				job.Files = map[string]string{"data.txt": v + "\n", "lib/x.txt": v + "-x\n"}
				if res, err := s.Run(ctx, job); err != nil || res.Stdout != v+"\n"+v+"-x\n" {
					t.Fatalf("placing %s: %v %+v", v, err, res)
				}
			}
		})

		// A persistent workspace carries the link into a later session.
		t.Run("workspace", func(t *testing.T) {
			name := fmt.Sprintf("ws-place-%s-%d", tier.Name(), time.Now().UnixNano())
			s1, err := tier.OpenSession(ctx, airlock.SessionOptions{Workspace: name})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s1.Run(ctx, cmdJob("sh", "-c", "echo intact > run.sh; ln -s run.sh data.txt")); err != nil {
				t.Fatal(err)
			}
			s1.Close()
			s2, err := tier.OpenSession(ctx, airlock.SessionOptions{Workspace: name})
			if err != nil {
				t.Fatal(err)
			}
			defer s2.Close()
			job := cmdJob("true")
			job.Files = map[string]string{"data.txt": "PLANTED\n"}
			if _, err := s2.Run(ctx, job); err == nil || !strings.Contains(err.Error(), "placing file data.txt: ") {
				t.Errorf("want a refusal naming data.txt, got %v", err)
			}
			if res, err := s2.Run(ctx, cmdJob("cat", "run.sh")); err != nil || res.Stdout != "intact\n" {
				t.Errorf("run.sh holds %q (%v)", res.Stdout, err)
			}
		})
		assertClean(t, tier, cfg)
	})
}
