package state_test

import (
	"context"
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

func TestLeaseNeverOverLimit(t *testing.T) {
	stores(t, func(t *testing.T, open func() state.Store) {
		a, b := open(), open()
		w := state.Window(time.Now())
		var total atomic.Int64
		var wg sync.WaitGroup
		for i := range 10 {
			s := a
			if i%2 == 1 {
				s = b
			}
			wg.Go(func() {
				for range 5 {
					n, err := s.Lease(context.Background(), "t", w, 3, 40)
					if err != nil {
						t.Error(err)
					}
					total.Add(int64(n))
				}
			})
		}
		wg.Wait()
		if total.Load() != 40 {
			t.Fatalf("leased %d runs of a budget of 40", total.Load())
		}
		if err := a.Return(context.Background(), "t", w, 5); err != nil {
			t.Fatal(err)
		}
		if n, _ := b.Lease(context.Background(), "t", w, 10, 40); n != 5 {
			t.Fatalf("after returning 5, leased %d", n)
		}
		if n, _ := b.Lease(context.Background(), "other", w, 10, 40); n != 10 {
			t.Fatalf("another tenant's budget: leased %d", n)
		}
	})
}

func TestSessionRegistry(t *testing.T) {
	stores(t, func(t *testing.T, open func() state.Store) {
		a, b := open(), open()
		ctx := context.Background()
		until := time.Now().Add(time.Minute).UTC().Truncate(time.Millisecond)
		s := state.Session{ID: "s-1", Tenant: "t", Tier: "process", Replica: "r1", Addr: "http://r1", Until: until}
		if err := a.PutSession(ctx, s); err != nil {
			t.Fatal(err)
		}
		got, ok, err := b.Session(ctx, "s-1")
		if err != nil || !ok || got.Addr != s.Addr || got.Replica != "r1" || !got.Until.Equal(until) {
			t.Fatalf("found %+v %v %v", got, ok, err)
		}
		later := until.Add(time.Hour)
		if err := a.Renew(ctx, "r1", later); err != nil {
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
	if len(got) != 3 || string(got[0]) != `{"n": 2}` || string(got[2]) != `{"n": 4}` {
		t.Fatalf("newest three, oldest first: %q", got)
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
	got, err := a.Pending(ctx, now.Add(-time.Minute))
	if err != nil || len(got) != 1 || got[0].Digest != "d-new" || string(got[0].Job) != `{"kind":"expr"}` || !got[0].Created.Equal(now) {
		t.Fatalf("requests of the last minute: %+v %v", got, err)
	}
}
