package state_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/state"
	"github.com/airlock-sandbox/airlock/internal/testing/pgtest"
)

// stores runs f against the embedded store and a real PostgreSQL.
func stores(t *testing.T, f func(t *testing.T, open func() state.Store)) {
	t.Run("embedded", func(t *testing.T) {
		s := state.NewEmbedded()
		t.Cleanup(func() { _ = s.Close() })
		f(t, func() state.Store { return s })
	})
	t.Run("postgres", func(t *testing.T) {
		dsn := pgtest.Start(t)
		f(t, func() state.Store {
			s, err := state.Open(context.Background(), dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		})
	})
}

func TestOpenSettings(t *testing.T) {
	s, err := state.Open(context.Background(), "")
	if err != nil || s.Shared() {
		t.Fatalf("empty setting: %v, shared %v", err, s != nil && s.Shared())
	}
	if _, err := state.Open(context.Background(), "redis://x"); err != state.ErrUnknownScheme {
		t.Fatalf("an unknown scheme: %v", err)
	}
}

// Replicas starting at once migrate the schema once, under the advisory
// lock, and all come up.
func TestConcurrentMigrations(t *testing.T) {
	dsn := pgtest.Start(t)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() {
			s, err := state.Open(context.Background(), dsn)
			if err == nil {
				err = s.Ping(context.Background())
				_ = s.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("replica %d: %v", i, err)
		}
	}
}

func TestRedeemOnce(t *testing.T) {
	stores(t, func(t *testing.T, open func() state.Store) {
		a, b := open(), open()
		r := state.Redemption{Token: "h1", Digest: "d", Tenant: "t", Expires: time.Now().Add(time.Minute)}
		var wins atomic.Int32
		var wg sync.WaitGroup
		for i := range 8 {
			s := a
			if i%2 == 1 {
				s = b
			}
			wg.Go(func() {
				ok, err := s.Redeem(context.Background(), r)
				if err != nil {
					t.Error(err)
				}
				if ok {
					wins.Add(1)
				}
			})
		}
		wg.Wait()
		if wins.Load() != 1 {
			t.Fatalf("the token was redeemed %d times, want once", wins.Load())
		}
		r.Token = "h2"
		if ok, err := b.Redeem(context.Background(), r); !ok || err != nil {
			t.Fatalf("another token: %v %v", ok, err)
		}
	})
}

// A replica whose clock runs ahead sweeps with its own time; a token it
// thinks expired is still taken by a replica whose clock is right (or
// behind), and must not run a second time there. The database's clock
// decides both the sweep and what is too late to redeem.
func TestRedeemOnceAcrossSkewedClocks(t *testing.T) {
	dsn := pgtest.Start(t)
	ctx := context.Background()
	open := func() state.Store {
		s, err := state.Open(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	right, ahead := open(), open()
	r := state.Redemption{Token: "h1", Digest: "d", Tenant: "t", Expires: time.Now().Add(10 * time.Minute)}
	if ok, err := right.Redeem(ctx, r); !ok || err != nil {
		t.Fatalf("first redemption: %v %v", ok, err)
	}
	// The replica an hour ahead sweeps.
	if err := ahead.Sweep(ctx, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if ok, err := right.Redeem(ctx, r); ok || err != nil {
		t.Fatalf("the token ran again after a replica ahead in time swept: %v %v", ok, err)
	}
	// A replica whose clock lags takes a token the database's clock says
	// expired: refused, not redeemed.
	r = state.Redemption{Token: "h2", Digest: "d", Tenant: "t", Expires: time.Now().Add(-time.Second)}
	if ok, err := right.Redeem(ctx, r); ok || err != state.ErrExpired {
		t.Fatalf("an expired token: %v %v, want ErrExpired", ok, err)
	}
}

// Replicas leasing from one bucket at once never take more than it
// holds: its burst, plus what refills while they lease.
func TestLeaseNeverOverBudget(t *testing.T) {
	stores(t, func(t *testing.T, open func() state.Store) {
		a, b := open(), open()
		ctx := context.Background()
		// 60 a minute: one a second refills, a burst of 40 is what counts.
		bd := state.Budget{PerMinute: 60, Burst: 40}
		var total atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for i := range 10 {
			s := a
			if i%2 == 1 {
				s = b
			}
			wg.Go(func() {
				for range 5 {
					n, err := s.Lease(ctx, "t", 3, bd)
					if err != nil {
						t.Error(err)
					}
					total.Add(int64(n))
				}
			})
		}
		wg.Wait()
		refill := int64(time.Since(start).Seconds()) + 1
		if got := total.Load(); got < 40 || got > 40+refill {
			t.Fatalf("leased %d runs from a bucket of 40 (refilling %d meanwhile)", got, refill)
		}
		// Spent: a second's refill at most, until runs come back.
		n0, _ := b.Lease(ctx, "t", 40, bd)
		if err := a.Return(ctx, "t", 5, bd); err != nil {
			t.Fatal(err)
		}
		if n, _ := b.Lease(ctx, "t", 40, bd); n < 5 || n0 > 2 || n > 7 {
			t.Fatalf("after returning 5, leased %d (%d before)", n, n0)
		}
		if n, _ := b.Lease(ctx, "other", 10, bd); n != 10 {
			t.Fatalf("another tenant's budget: leased %d", n)
		}
		// The bucket never holds more than its burst.
		if err := a.Return(ctx, "other", 1000, bd); err != nil {
			t.Fatal(err)
		}
		if n, _ := b.Lease(ctx, "other", 1000, bd); n != 40 {
			t.Fatalf("a bucket given back more than it lent: leased %d of a burst of 40", n)
		}
	})
}

// Replicas holding slots of one tenant at once never hold more than its
// limit together; a hold that lapsed (its replica died) frees its slots.
func TestSlotsNeverOverLimit(t *testing.T) {
	stores(t, func(t *testing.T, open func() state.Store) {
		ctx := context.Background()
		now := time.Now()
		live := now.Add(time.Minute)
		var mu sync.Mutex
		held := map[string]int{}
		var wg sync.WaitGroup
		for i := range 6 {
			s := open()
			replica := string(rune('a' + i%3))
			wg.Go(func() {
				for range 5 {
					mu.Lock() // one replica changes its own hold one call at a time
					n, err := s.HoldSlots(ctx, state.Hold{Tenant: "t", Replica: replica, Held: held[replica], Want: 2, Limit: 10, Now: now, Until: live})
					if err != nil {
						t.Error(err)
					}
					held[replica] += n
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if sum := held["a"] + held["b"] + held["c"]; sum != 10 {
			t.Fatalf("replicas hold %d slots of a limit of 10: %v", sum, held)
		}
		s := open()
		// a gives two back; b takes them.
		if n, err := s.HoldSlots(ctx, state.Hold{Tenant: "t", Replica: "a", Held: held["a"] - 2, Limit: 10, Now: now, Until: live}); err != nil || n != 0 {
			t.Fatalf("giving back: %d %v", n, err)
		}
		if n, _ := s.HoldSlots(ctx, state.Hold{Tenant: "t", Replica: "b", Held: held["b"], Want: 5, Limit: 10, Now: now, Until: live}); n != 2 {
			t.Fatalf("after a gave back 2, b got %d", n)
		}
		if n, _ := s.HoldSlots(ctx, state.Hold{Tenant: "u", Replica: "b", Want: 5, Limit: 10, Now: now, Until: live}); n != 5 {
			t.Fatalf("another tenant's slots: %d", n)
		}
		// c's hold lapses: its slots are free again, for d.
		later := live.Add(time.Second)
		if err := s.Renew(ctx, "a", nil, later.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		if err := s.Renew(ctx, "b", nil, later.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		if n, _ := s.HoldSlots(ctx, state.Hold{Tenant: "t", Replica: "d", Want: 10, Limit: 10, Now: later, Until: later.Add(time.Minute)}); n != held["c"] {
			t.Fatalf("after c's hold lapsed, d got %d, want c's %d", n, held["c"])
		}
	})
}

// A tenant's sessions are limited across replicas; a session whose lease
// lapsed does not count.
func TestSessionLimit(t *testing.T) {
	stores(t, func(t *testing.T, open func() state.Store) {
		ctx := context.Background()
		now := time.Now()
		var wins atomic.Int32
		var wg sync.WaitGroup
		for i := range 8 {
			s := open()
			wg.Go(func() {
				ok, err := s.PutSession(ctx, state.Session{ID: fmt.Sprint("s", i), Tenant: "t", Replica: fmt.Sprint("r", i%2), Until: now.Add(time.Minute)}, 3, now)
				if err != nil {
					t.Error(err)
				}
				if ok {
					wins.Add(1)
				}
			})
		}
		wg.Wait()
		if wins.Load() != 3 {
			t.Fatalf("%d sessions registered under a limit of 3", wins.Load())
		}
		s := open()
		if ok, _ := s.PutSession(ctx, state.Session{ID: "u1", Tenant: "u", Until: now.Add(time.Minute)}, 3, now); !ok {
			t.Fatal("another tenant's session was refused")
		}
		// Once the three lapse, a fourth is registered.
		later := now.Add(2 * time.Minute)
		if ok, _ := s.PutSession(ctx, state.Session{ID: "s-late", Tenant: "t", Until: later.Add(time.Minute)}, 3, later); !ok {
			t.Fatal("lapsed sessions still count against the limit")
		}
	})
}

// The first decision on a digest stands across replicas, unless it is
// overwritten on purpose.
func TestDecisions(t *testing.T) {
	stores(t, func(t *testing.T, open func() state.Store) {
		ctx := context.Background()
		a, b := open(), open()
		at := time.Now().UTC().Truncate(time.Millisecond)
		d := state.Decision{Digest: "d1", Tenant: "t", Approver: "x", Reason: "fine", Expires: at.Add(time.Minute), At: at}
		var wins atomic.Int32
		var wg sync.WaitGroup
		for i := range 6 {
			s, dd := a, d
			if i%2 == 1 {
				s = b
			}
			dd.Approver = fmt.Sprint("approver", i)
			wg.Go(func() {
				if ok, err := s.Decide(ctx, dd, false); err != nil {
					t.Error(err)
				} else if ok {
					wins.Add(1)
				}
			})
		}
		wg.Wait()
		if wins.Load() != 1 {
			t.Fatalf("%d first decisions on one digest", wins.Load())
		}
		got, err := b.Decisions(ctx, at.Add(-time.Second))
		if err != nil || len(got) != 1 || got[0].Digest != "d1" || !got[0].Expires.Equal(d.Expires) || got[0].Reason != "fine" {
			t.Fatalf("decisions: %+v %v", got, err)
		}
		d.Denied, d.Approver = true, "y"
		if ok, _ := a.Decide(ctx, d, true); !ok {
			t.Fatal("an overwrite was refused")
		}
		if got, _ := b.Decisions(ctx, at); len(got) != 1 || !got[0].Denied || got[0].Approver != "y" {
			t.Fatalf("after the overwrite: %+v", got)
		}
		if got, _ := b.Decisions(ctx, at.Add(time.Second)); len(got) != 0 {
			t.Fatalf("decisions before since listed: %+v", got)
		}
		// The job asked for again after its decision: the first decision
		// of the new request replaces the old one, and stands.
		again := d
		again.Asked, again.At, again.Denied, again.Approver = at.Add(time.Minute), at.Add(2*time.Minute), false, "z"
		if ok, err := b.Decide(ctx, again, false); !ok || err != nil {
			t.Fatalf("the decision of a request asked again: %v %v", ok, err)
		}
		late := again
		late.At, late.Approver = at.Add(3*time.Minute), "w"
		if ok, _ := a.Decide(ctx, late, false); ok {
			t.Fatal("a second decision of the request asked again was taken")
		}
		if got, _ := a.Decisions(ctx, at); len(got) != 1 || got[0].Denied || got[0].Approver != "z" {
			t.Fatalf("after the request asked again: %+v", got)
		}
	})
}

func TestSessionRegistry(t *testing.T) {
	stores(t, func(t *testing.T, open func() state.Store) {
		a, b := open(), open()
		ctx := context.Background()
		until := time.Now().Add(time.Minute).UTC().Truncate(time.Millisecond)
		s := state.Session{ID: "s-1", Tenant: "t", Tier: "process", Replica: "r1", Addr: "http://r1", Until: until}
		if ok, err := a.PutSession(ctx, s, 0, time.Now()); err != nil || !ok {
			t.Fatal(err)
		}
		got, ok, err := b.Session(ctx, "s-1")
		if err != nil || !ok || got.Addr != s.Addr || got.Replica != "r1" || !got.Until.Equal(until) {
			t.Fatalf("found %+v %v %v", got, ok, err)
		}
		later := until.Add(time.Hour)
		if err := a.Renew(ctx, "r1", []string{"s-1"}, later); err != nil {
			t.Fatal(err)
		}
		if got, _, _ := b.Session(ctx, "s-1"); !got.Until.Equal(later) {
			t.Fatalf("lease not renewed: %v", got.Until)
		}
		if err := a.DropSession(ctx, "s-1"); err != nil {
			t.Fatal(err)
		}
		if _, ok, _ := b.Session(ctx, "s-1"); ok {
			t.Fatal("a dropped session is still registered")
		}
		if err := b.Sweep(ctx, time.Now()); err != nil {
			t.Fatal(err)
		}
	})
}

func TestRecords(t *testing.T) {
	dsn := pgtest.Start(t)
	ctx := context.Background()
	a, err := state.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var recs []state.Record
	for i := range 5 {
		recs = append(recs, state.Record{Tenant: "t", Time: time.Now(), Replica: "r1", JSON: []byte(`{"n":` + string(rune('0'+i)) + `}`)})
	}
	recs = append(recs, state.Record{Tenant: "u", Time: time.Now(), Replica: "r1", JSON: []byte(`{"n":9}`)})
	if err := a.AddRecords(ctx, recs); err != nil {
		t.Fatal(err)
	}
	got, err := a.Records(ctx, "t", 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || string(got[0]) != `{"n":2}` || string(got[2]) != `{"n":4}` {
		t.Fatalf("newest three, oldest first: %q", got)
	}
	if err := a.TrimRecords(ctx, "t", 2); err != nil {
		t.Fatal(err)
	}
	if got, err := a.Records(ctx, "t", 10); err != nil || len(got) != 2 || string(got[0]) != `{"n":3}` {
		t.Fatalf("trimmed to the newest two: %q %v", got, err)
	}
	if got, err := a.Records(ctx, "u", 10); err != nil || len(got) != 1 {
		t.Fatalf("another tenant's records, trimmed too: %q %v", got, err)
	}
}

func TestPendingShared(t *testing.T) {
	dsn := pgtest.Start(t)
	ctx := context.Background()
	a, err := state.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	now := time.Now().UTC().Truncate(time.Millisecond)
	old := state.Pending{Digest: "d-old", Tenant: "t", Tier: "starlark", Rule: "r", Job: []byte(`{"kind":"expr"}`), Created: now.Add(-time.Hour)}
	fresh := old
	fresh.Digest, fresh.Created = "d-new", now
	for _, p := range []state.Pending{old, fresh, fresh} { // asked twice: one request
		if err := a.PutPending(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	got, err := a.Pending(ctx, now.Add(-time.Minute), nil)
	if err != nil || len(got) != 1 || got[0].Digest != "d-new" || string(got[0].Job) != `{"kind":"expr"}` || !got[0].Created.Equal(now) {
		t.Fatalf("requests of the last minute: %+v %v", got, err)
	}
	// What the replica holds already is not read again.
	got, err = a.Pending(ctx, now.Add(-2*time.Hour), func(d string, created time.Time) bool { return d == "d-new" && created.Equal(now) })
	if err != nil || len(got) != 1 || got[0].Digest != "d-old" {
		t.Fatalf("requests but the one held: %+v %v", got, err)
	}
}
