package state

import (
	"context"
	"slices"
	"sync"
	"time"
)

type bucket struct {
	tokens float64
	at     time.Time
}

type holder struct{ tenant, replica string }

type hold struct {
	n     int
	until time.Time
}

// embedded is the in-process store: one replica's state, lost on restart.
type embedded struct {
	mu        sync.Mutex
	redeemed  map[string]time.Time // token hash: expiry
	buckets   map[string]*bucket
	slots     map[holder]hold
	sessions  map[string]Session
	decisions map[string]Decision
}

// NewEmbedded returns an empty in-process store.
func NewEmbedded() Store {
	return &embedded{redeemed: map[string]time.Time{}, buckets: map[string]*bucket{}, slots: map[holder]hold{},
		sessions: map[string]Session{}, decisions: map[string]Decision{}}
}

func (e *embedded) Redeem(_ context.Context, r Redemption) (bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.redeemed[r.Token]; ok {
		return false, nil
	}
	e.redeemed[r.Token] = r.Expires
	return true, nil
}

func (e *embedded) bucket(tenant string, b Budget, now time.Time) *bucket {
	bk := e.buckets[tenant]
	if bk == nil {
		bk = &bucket{tokens: float64(b.Burst), at: now}
		e.buckets[tenant] = bk
	}
	bk.tokens, bk.at = b.refill(bk.tokens, now.Sub(bk.at)), now
	return bk
}

func (e *embedded) Lease(_ context.Context, tenant string, want int, b Budget) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	bk := e.bucket(tenant, b, time.Now())
	n := max(0, min(want, int(bk.tokens)))
	bk.tokens -= float64(n)
	return n, nil
}

func (e *embedded) Return(_ context.Context, tenant string, n int, b Budget) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	bk := e.bucket(tenant, b, time.Now())
	bk.tokens = min(float64(b.Burst), bk.tokens+float64(n))
	return nil
}

func (e *embedded) HoldSlots(_ context.Context, h Hold) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	used := h.Held
	for k, v := range e.slots {
		if k.tenant == h.Tenant && k.replica != h.Replica && !v.until.Before(h.Now) {
			used += v.n
		}
	}
	n := max(0, min(h.Want, h.Limit-used))
	e.slots[holder{h.Tenant, h.Replica}] = hold{n: h.Held + n, until: h.Until}
	return n, nil
}

func (e *embedded) PutSession(_ context.Context, s Session, limit int, now time.Time) (bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.sessions[s.ID]; !ok && limit > 0 {
		live := 0
		for _, o := range e.sessions {
			if o.Tenant == s.Tenant && !o.Until.Before(now) {
				live++
			}
		}
		if live >= limit {
			return false, nil
		}
	}
	e.sessions[s.ID] = s
	return true, nil
}

func (e *embedded) Session(_ context.Context, id string) (Session, bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s, ok := e.sessions[id]
	return s, ok, nil
}

func (e *embedded) Renew(_ context.Context, replica string, sessions []string, until time.Time) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, id := range sessions {
		if s, ok := e.sessions[id]; ok && s.Replica == replica {
			s.Until = until
			e.sessions[id] = s
		}
	}
	for h, v := range e.slots {
		if h.replica == replica {
			v.until = until
			e.slots[h] = v
		}
	}
	return nil
}

func (e *embedded) Claim(context.Context, string, string, time.Duration) error { return nil }

func (e *embedded) DropSession(_ context.Context, id string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.sessions, id)
	return nil
}

// PutPending and Pending keep nothing: one replica keeps its approval
// requests in memory.
func (e *embedded) PutPending(context.Context, Pending) error { return nil }

func (e *embedded) Pending(context.Context, time.Time, func(string, time.Time) bool) ([]Pending, error) {
	return nil, nil
}

func (e *embedded) ForgetPending(context.Context, time.Time) error { return nil }

func (e *embedded) Decide(_ context.Context, d Decision, overwrite bool) (bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if old, ok := e.decisions[d.Digest]; ok && !overwrite && !old.At.Before(d.Asked) {
		return false, nil
	}
	d.Asked = time.Time{}
	e.decisions[d.Digest] = d
	return true, nil
}

func (e *embedded) Decisions(_ context.Context, since time.Time) ([]Decision, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []Decision
	for _, d := range e.decisions {
		if !d.At.Before(since) {
			out = append(out, d)
		}
	}
	slices.SortFunc(out, func(a, b Decision) int { return a.At.Compare(b.At) })
	return out, nil
}

// AddRecords and Records keep nothing: one replica lists its own
// records from memory.
func (e *embedded) AddRecords(context.Context, []Record) error { return nil }

func (e *embedded) Records(context.Context, string, int) ([][]byte, error) { return nil, nil }

func (e *embedded) TrimRecords(context.Context, string, int) error { return nil }

func (e *embedded) Sweep(_ context.Context, now time.Time) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	for k, exp := range e.redeemed {
		if now.After(exp) {
			delete(e.redeemed, k)
		}
	}
	for t, bk := range e.buckets {
		if now.Sub(bk.at) > 10*time.Minute { // long refilled
			delete(e.buckets, t)
		}
	}
	for h, v := range e.slots {
		if v.n == 0 || now.Sub(v.until) > time.Hour {
			delete(e.slots, h)
		}
	}
	for d, dc := range e.decisions {
		if now.Sub(dc.At) > 24*time.Hour {
			delete(e.decisions, d)
		}
	}
	return nil
}

func (e *embedded) Now(context.Context) (time.Time, error) { return time.Now(), nil }
func (e *embedded) Ping(context.Context) error             { return nil }
func (e *embedded) Shared() bool                           { return false }
func (e *embedded) Close() error                           { return nil }
