package process

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
)

// TestWaitWarm: a tier without a pool is warm at once; a pooled tier's
// WaitWarm returns once every pooled sandbox is started and every used
// one destroyed (a claim then costs what the benchmarks quote); after
// Close it fails instead of waiting for ever.
func TestWaitWarm(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var _ airlock.Pooler = (*Tier)(nil)
	cold := newTestTier(t, bothTiers[0], testConfig(t))
	if err := cold.WaitWarm(ctx); err != nil {
		t.Fatalf("no pool: %v", err)
	}

	cfg := testConfig(t).WithPool(2)
	tier := newTestTier(t, bothTiers[0], cfg)
	for round := range 3 {
		if err := tier.WaitWarm(ctx); err != nil {
			t.Fatal(err)
		}
		st := tier.pool.Stats(poolKey{})
		ready, pending := st.Ready, st.Pending
		if ready != 2 || pending != 0 {
			t.Fatalf("round %d: WaitWarm returned with %d ready, %d being destroyed", round, ready, pending)
		}
		before := tier.PoolStats().Hits
		if res, err := tier.Run(ctx, cmdJob("true")); err != nil || tier.PoolStats().Hits != before+1 {
			t.Fatalf("round %d: pooled run: %v %+v", round, err, res)
		}
		if st := tier.PoolStats(); st.Size != 2 || st.Hits != uint64(round+1) || st.Misses != 0 {
			t.Fatalf("round %d: pool stats %+v; want size 2, %d hits, no misses", round, st, round+1)
		}
	}
	if st := cold.PoolStats(); !reflect.DeepEqual(st, airlock.PoolStats{}) {
		t.Fatalf("a tier without a pool reports %+v", st)
	}
	assertClean(t, tier, cfg)
	if err := tier.WaitWarm(ctx); err == nil {
		t.Fatal("WaitWarm on a closed tier returned nil")
	}
}

// TestGuardedWaitWarm: WaitWarm starts the worker pool and returns when
// it is full; a claimed worker is discarded and replaced.
func TestGuardedWaitWarm(t *testing.T) {
	g := newGuarded(t, "expr")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for round := range 2 {
		if err := g.WaitWarm(ctx); err != nil {
			t.Fatal(err)
		}
		if n := g.PoolStats().Ready; n != g.size {
			t.Fatalf("round %d: %d workers ready, want %d", round, n, g.size)
		}
		res, err := g.Run(ctx, airlock.Job{Kind: airlock.KindExpr, Code: "1 + 2"})
		if err != nil || res.Value != int64(3) {
			t.Fatalf("round %d: %v %+v", round, err, res)
		}
	}
}

// TestGuardedCancelWhileStarting: with no worker ready (a fresh tier's
// pool has only begun to fill), a run whose context is already cancelled
// starts a worker of its own and reports a typed stop, not a bare context
// error.
func TestGuardedCancelWhileStarting(t *testing.T) {
	g := newGuarded(t, "expr")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err := g.Run(ctx, airlock.Job{Kind: airlock.KindExpr, Code: "1"})
	if s, ok := airlock.AsStop(err); !ok || s.Reason != airlock.StopKilled || res.Stopped == nil {
		t.Fatalf("want stopped: killed, got %v (%+v)", err, res)
	}
}
