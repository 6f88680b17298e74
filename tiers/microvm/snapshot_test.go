package microvm

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock"
)

// TestSnapshotFreshEntropy restores the same snapshot twice: the two runs
// must read different random numbers (the agent mixes host entropy into
// the pool and reseeds the CRNG before each job).
func TestSnapshotFreshEntropy(t *testing.T) {
	tier := shared.get(t, WarmSnapshot)
	job := command("od", "-An", "-N32", "-tx1", "/dev/urandom")
	var outs []string
	for range 2 {
		res, err := tier.Run(context.Background(), job)
		if err != nil || res.ExitCode != 0 || len(strings.Fields(res.Stdout)) != 32 {
			t.Fatalf("%v %+v", err, res)
		}
		outs = append(outs, res.Stdout)
	}
	if outs[0] == outs[1] {
		t.Fatalf("two restores of one snapshot read the same random bytes: %s", outs[0])
	}
}

// TestSnapshotTampered edits the snapshot on disk (a flipped byte, then a
// trailing byte) and checks that restores are refused before the VM runs.
func TestSnapshotTampered(t *testing.T) {
	tier := shared.get(t, WarmSnapshot)
	job := command("sh", "-c", "echo ran")
	if res, err := tier.Run(context.Background(), job); err != nil || res.Stdout != "ran\n" {
		t.Fatalf("untampered run: %v %+v", err, res)
	}
	mem := max(memFor(mustPrepare(t, job)), tier.baseMem())
	tier.snapMu.Lock()
	s := tier.snaps[mem]
	tier.snapMu.Unlock()
	if s == nil {
		t.Fatalf("no snapshot for %d MB", mem)
	}
	orig, err := os.ReadFile(s.path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.WriteFile(s.path, orig, 0o600); err != nil {
			t.Error(err)
		}
	})
	tampered := map[string][]byte{
		"flipped byte":  flip(orig, len(orig)/2),
		"trailing data": append(append([]byte(nil), orig...), 0),
		"truncated":     orig[:len(orig)-4096],
	}
	for name, data := range tampered {
		t.Run(name, func(t *testing.T) {
			if err := os.WriteFile(s.path, data, 0o600); err != nil {
				t.Fatal(err)
			}
			res, err := tier.Run(context.Background(), job)
			if !errors.Is(err, ErrSnapshotTampered) {
				t.Fatalf("restore of a tampered snapshot: %v (%+v)", err, res)
			}
			if res.Stdout != "" || res.Error == nil {
				t.Fatalf("tampered snapshot ran or the result hides the error: %+v", res)
			}
		})
	}
	assertNoVMs(t, tier)
}

func flip(b []byte, i int) []byte {
	c := append([]byte(nil), b...)
	c[i] ^= 0xff
	return c
}

func mustPrepare(t *testing.T, job airlock.Job) *airlock.Job {
	t.Helper()
	j, err := airlock.Prepare(job, airlock.DefaultLimitPolicy)
	if err != nil {
		t.Fatal(err)
	}
	return &j
}
