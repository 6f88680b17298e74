package process

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock"
)

func binary256() string {
	b := make([]byte, 256)
	for i := range b {
		b[i] = byte(i)
	}
	return string(b)
}

// TestFilesInAndOut: a 256-byte binary file arrives as 256 bytes (cat
// returns it intact on stdout), and what the program wrote comes back
// through Collect: regular files only, a planted link reported and not
// followed; also from a run stopped by its wall clock.
func TestFilesInAndOut(t *testing.T) {
	forBothTiers(t, func(t *testing.T, tier *Tier, cfg Config) {
		ctx := context.Background()
		job := cmdJob("sh", "-c", `cat in.bin; mkdir out; cp in.bin out/copy.bin; echo hi > out/b.txt; ln -s /etc/passwd out/leak.txt`)
		job.Files = map[string]string{"in.bin": binary256()}
		job.Collect = []string{"out/*.txt", "out/copy.bin", "none/*"}
		res, err := tier.Run(ctx, job)
		if err != nil {
			t.Fatalf("%v (stderr %q)", err, res.Stderr)
		}
		if res.Stdout != binary256() {
			t.Errorf("stdout is %d bytes %q, want the 256-byte file", len(res.Stdout), res.Stdout)
		}
		if len(res.Files) != 2 || res.Files["out/copy.bin"] != binary256() || res.Files["out/b.txt"] != "hi\n" {
			t.Errorf("collected %q", res.Files)
		}
		for _, want := range []string{"out/leak.txt: a symbolic link, not followed", "none/*: matched nothing"} {
			if !slices.Contains(res.FilesSkipped, want) {
				t.Errorf("skipped %q lacks %q", res.FilesSkipped, want)
			}
		}

		stopped := cmdJob("sh", "-c", `echo partial > r.txt; sleep 30`)
		stopped.Collect = []string{"r.txt"}
		stopped.Limits.WallMS = 1000
		res, err = tier.Run(ctx, stopped)
		if s, ok := airlock.AsStop(err); !ok || s.Reason != airlock.StopTimeout {
			t.Fatalf("err %v, want a timeout", err)
		}
		if res.Files["r.txt"] != "partial\n" {
			t.Errorf("stopped run collected %q (skipped %q)", res.Files, res.FilesSkipped)
		}
		assertClean(t, tier, cfg)
	})
}

// TestCollectInSession: a session's scratch keeps what earlier runs left,
// so a later run collects it; a directory an earlier run swapped for a
// link to a host directory is reported, not read through.
func TestCollectInSession(t *testing.T) {
	forBothTiers(t, func(t *testing.T, tier *Tier, cfg Config) {
		ctx := context.Background()
		host := t.TempDir()
		if err := os.WriteFile(filepath.Join(host, "secret.txt"), []byte("host secret"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(host, 0o755); err != nil {
			t.Fatal(err)
		}
		s, err := tier.OpenSession(ctx, airlock.SessionOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if _, err := s.Run(ctx, cmdJob("sh", "-c", "echo kept > kept.txt; ln -s "+host+" out")); err != nil {
			t.Fatal(err)
		}
		job := cmdJob("true")
		job.Collect = []string{"kept.txt", "out/*.txt"}
		res, err := s.Run(ctx, job)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Files) != 1 || res.Files["kept.txt"] != "kept\n" {
			t.Errorf("collected %q", res.Files)
		}
		if !slices.Contains(res.FilesSkipped, "out: a symbolic link, not followed") {
			t.Errorf("skipped %q lacks the linked directory", res.FilesSkipped)
		}
	})
}

// TestExecTooLong: arguments and an environment the kernel would not
// start a program with are the job's, never the tier's failure. A single
// string of 128 KiB or more is refused before a sandbox starts (not
// admitted, as on every OS tier); strings each short enough but too
// many together for execve (E2BIG) make the job invalid, naming argv.
func TestExecTooLong(t *testing.T) {
	forBothTiers(t, func(t *testing.T, tier *Tier, cfg Config) {
		ctx := context.Background()
		long := strings.Repeat("x", 128<<10) // MAX_ARG_STRLEN
		for name, job := range map[string]airlock.Job{
			"argument": cmdJob("sh", "-c", "echo started", "sh", long),
			"variable": func() airlock.Job {
				j := cmdJob("sh", "-c", "echo started")
				j.Env = map[string]string{"LONG": long}
				return j
			}(),
		} {
			res, err := tier.Run(ctx, job)
			if kind := airlock.KindOf(err); kind != airlock.ErrNotAdmitted || !strings.Contains(err.Error(), "bytes or more") {
				t.Errorf("%s of %d bytes: %v (%s), stdout %q; want not admitted", name, len(long), err, kind, res.Stdout)
			}
		}
		many := cmdJob("sh", "-c", "echo started", "sh")
		for range 40 {
			many.Argv = append(many.Argv, strings.Repeat("y", 100_000))
		}
		res, err := tier.Run(ctx, many)
		var inv *airlock.InvalidJob
		if !errors.As(err, &inv) || inv.Field != "argv" {
			t.Errorf("4 MB of arguments: %v (%s), stdout %q; want invalid argv", err, airlock.KindOf(err), res.Stdout)
		}
		assertClean(t, tier, cfg)
	})
}
