package gvisor

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
)

// TestIDsPrefixFree: no sandbox id a tier hands out is a prefix of another
// id that may be alive at the same time, in its own tier or in any other
// tier sharing the directory. runsc resolves the id of every command (run,
// delete, exec, state, kill…) as a prefix and an exact match does not win:
// with "<owner>-1" and "<owner>-10" alive, `runsc delete <owner>-1` fails as
// ambiguous.
func TestIDsPrefixFree(t *testing.T) {
	// Owners as own names them; their PIDs are decimal prefixes of one
	// another and some share the random part.
	owners := []string{
		idPrefix + "1-0a1b2c3d",
		idPrefix + "12-0a1b2c3d",
		idPrefix + "123-0a1b2c3d",
		idPrefix + "12-0a1b2c3e",
		idPrefix + "4194304-ffffffff",
		idPrefix + "41943-ffffffff",
	}
	var seqs []uint64
	for n := uint64(1); n <= 1200; n++ {
		seqs = append(seqs, n)
	}
	for p := uint64(10_000); p <= math.MaxUint64/10; p *= 10 {
		seqs = append(seqs, p-1, p, p+1, 10*p/9)
	}
	seqs = append(seqs, math.MaxUint64)
	var ids []string
	for _, owner := range owners {
		tier := &Tier{owner: owner}
		for _, n := range seqs {
			tier.seq.Store(n - 1)
			id := tier.newID()
			if got, _ := parseID(id); got != owner {
				t.Fatalf("parseID(%q) = owner %q, want %q: a sweep would not know whose it is", id, got, owner)
			}
			ids = append(ids, id)
		}
	}
	// Leftovers of earlier versions share the state directory with them.
	ids = append(ids, idPrefix+"12-0123456789ab", idPrefix+"1-0a1b2c3d0a1b")
	slices.Sort(ids)
	// In sorted order, an id that is a prefix of any other is a prefix of
	// the next one.
	bad := 0
	for i := 1; i < len(ids); i++ {
		if ids[i] == ids[i-1] {
			t.Errorf("id %q handed out twice", ids[i])
		} else if strings.HasPrefix(ids[i], ids[i-1]) {
			if bad++; bad <= 5 {
				t.Errorf("id %q is a prefix of %q: runsc cannot name it while both exist", ids[i-1], ids[i])
			}
		}
	}
	if bad > 5 {
		t.Errorf("… %d ids in all are prefixes of others", bad)
	}
}

// TestDeleteOrder: a sweep deletes leftovers of the version whose ids were
// "<owner>-<n>" so that no id is deleted while an id it abbreviates exists.
func TestDeleteOrder(t *testing.T) {
	owner := idPrefix + "42-0a1b2c3d"
	var ids []string
	for n := 1; n <= 120; n++ {
		ids = append(ids, owner+"-"+itoa(n), owner+"-"+itoa(n)+idEnd)
	}
	rand.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	ids = deleteOrder(ids)
	for i, id := range ids {
		for _, later := range ids[i+1:] {
			if strings.HasPrefix(later, id) {
				t.Fatalf("%s is deleted before %s, which it abbreviates", id, later)
			}
		}
	}
}

// TestWallAmidManySandboxes: the wall clock stops a job while a dozen other
// sandboxes of its tier are alive. The job's sandbox has the tier's first
// id and the others come after it, as when a job starts just before a burst
// of others: with ids of the form "<owner>-<n>", "<owner>-1" could not be
// deleted while "<owner>-10"… existed, so a 2 s wall stopped a cold job only
// once the others had ended, and a pooled job's sandbox outlived its result.
// The other sandboxes are started from the job's placed-files check, which
// runs after its sandbox is named and before its wall clock starts, so the
// job's wall always expires while they are alive.
func TestWallAmidManySandboxes(t *testing.T) {
	for _, pooled := range []bool{false, true} {
		name := "Cold"
		if pooled {
			name = "Pooled"
		}
		t.Run(name, func(t *testing.T) { wallAmidMany(t, pooled) })
	}
}

func wallAmidMany(t *testing.T, pooled bool) {
	const (
		others = 11
		wall   = 2 * time.Second
		slack  = 3 * time.Second
	)
	cfg := NewConfig()
	if pooled {
		cfg = cfg.WithPool(1, 1)
	}
	tier := newTier(t, cfg)
	var target string // the job's sandbox
	if pooled {
		warm(t, tier)
		ids := listed(t, tier)
		if len(ids) != 1 {
			t.Fatalf("want the pooled sandbox alone running, runsc lists %v", ids)
		}
		target = ids[0] // the tier's first id
	}

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	// Registered after newTier's: runs first. Ends the others, closes the
	// tier and force-deletes whatever is still running, so the test stays
	// bounded and leaves nothing behind even when the tier could not.
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		tier.Close()
		left := listed(t, tier)
		if len(left) > 0 {
			t.Errorf("sandboxes still running after Close: %v", left)
		}
		slices.SortFunc(left, func(a, b string) int { return len(b) - len(a) })
		for _, id := range left {
			_ = tier.destroy(id, filepath.Join(tier.base, "sb", id), true)
		}
	})
	startOthers := func() {
		for range others {
			wg.Add(1)
			go func() {
				defer wg.Done()
				j := cmdJob("sleep", "10")
				j.Limits.WallMS = 60_000
				res, err := tier.Run(ctx, j)
				if st, ok := airlock.AsStop(err); err != nil && !(ok && st.Reason == airlock.StopKilled) {
					t.Errorf("another sandbox: %v (%+v)", err, res)
				}
			}()
		}
	}

	var alive []string
	check := func(dir string) error {
		if !pooled {
			target = filepath.Base(filepath.Dir(dir)) // <dir>/sb/<id>/scratch
		}
		startOthers()
		deadline := time.Now().Add(time.Minute)
		for {
			alive = slices.DeleteFunc(listed(t, tier), func(id string) bool { return id == target })
			if len(alive) >= others {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("only %v of the others appeared", alive)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	job := cmdJob("sleep", "60")
	job.Limits.WallMS = wall.Milliseconds()
	res, err := tier.Run(airlock.WithPlacedCheck(context.Background(), check), job)
	returned := time.Now()
	ran := time.Duration(res.Timings.RunUS) * time.Microsecond
	t.Logf("job %s, started with %d others alive %v: %v after %v", target, len(alive), alive, err, ran)
	if st, ok := airlock.AsStop(err); !ok || st.Reason != airlock.StopTimeout {
		t.Fatalf("want a timeout, got %v (%+v)", err, res)
	}
	if pooled && tier.Stats().Hits != 1 {
		t.Errorf("the job did not claim the pooled sandbox: %+v", tier.Stats())
	}
	if ran > wall+slack {
		t.Errorf("a %v wall clock stopped the job after %v: its sandbox could not be destroyed while the others lived", wall, ran)
	}
	// The job's sandbox is gone soon after the result (a pooled one is
	// destroyed in the background), and none of the others went with it.
	for {
		ids := listed(t, tier)
		if !slices.Contains(ids, target) {
			if n := len(ids); n < others {
				t.Errorf("only %d of the %d others survived the job's stop: %v", n, others, ids)
			}
			break
		}
		if time.Since(returned) > slack {
			t.Errorf("the stopped job's sandbox %s still runs %v after its result", target, time.Since(returned).Round(time.Millisecond))
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestStateMayHold: the sweep asks runsc for its list only when its state
// directory names a sandbox the sweep would claim, or a name it cannot
// read as an id of the tier's.
func TestStateMayHold(t *testing.T) {
	live, dead := idPrefix+"100-0a1b2c3d-1.sb", idPrefix+"200-4e5f6a7b-3.sb"
	here := func(id string) bool { return id == dead }
	for _, c := range []struct {
		names []string
		want  bool
	}{
		{nil, false},
		{[]string{live + "_sandbox:" + live + ".lock", "runsc-" + live + ".sock", "null-netns", "other_sandbox:other.state"}, false},
		{[]string{live + "_sandbox:" + live + ".lock", dead + "_sandbox:" + dead + ".state"}, true},
		{[]string{"runsc-" + dead + ".sock"}, true},
		{[]string{"x-" + idPrefix + "odd"}, true}, // a form it does not know
	} {
		dir := t.TempDir()
		for _, n := range c.names {
			if err := os.WriteFile(filepath.Join(dir, n), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if got := (&Tier{state: dir}).stateMayHold(here); got != c.want {
			t.Errorf("%v: %v, want %v", c.names, got, c.want)
		}
	}
	if !(&Tier{state: filepath.Join(t.TempDir(), "missing")}).stateMayHold(here) {
		t.Error("an unreadable state directory must send the sweep to runsc")
	}
}
