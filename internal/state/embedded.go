package state

import (
	"context"
	"sync"
	"time"
)

type window struct {
	tenant string
	start  time.Time
}

// embedded is the in-process store: one replica's state, lost on restart.
type embedded struct {
	mu       sync.Mutex
	redeemed map[string]time.Time // token hash: expiry
	used     map[window]int
	sessions map[string]Session
}

// NewEmbedded returns an empty in-process store.
func NewEmbedded() Store {
	return &embedded{redeemed: map[string]time.Time{}, used: map[window]int{}, sessions: map[string]Session{}}
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

func (e *embedded) Lease(_ context.Context, tenant string, start time.Time, want, limit int) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	w := window{tenant, start.UTC()}
	n := max(0, min(want, limit-e.used[w]))
	e.used[w] += n
	return n, nil
}

func (e *embedded) Return(_ context.Context, tenant string, start time.Time, n int) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	w := window{tenant, start.UTC()}
	e.used[w] = max(0, e.used[w]-n)
	return nil
}

func (e *embedded) PutSession(_ context.Context, s Session) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.sessions[s.ID] = s
	return nil
}

func (e *embedded) Session(_ context.Context, id string) (Session, bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s, ok := e.sessions[id]
	return s, ok, nil
}

func (e *embedded) Renew(_ context.Context, replica string, until time.Time) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	for id, s := range e.sessions {
		if s.Replica == replica {
			s.Until = until
			e.sessions[id] = s
		}
	}
	return nil
}

func (e *embedded) DropSession(_ context.Context, id string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.sessions, id)
	return nil
}

// PutPending and Pending keep nothing: one replica keeps its approval
// requests in memory.
func (e *embedded) PutPending(context.Context, Pending) error { return nil }

func (e *embedded) Pending(context.Context, time.Time) ([]Pending, error) { return nil, nil }

// AddRecords and Records keep nothing: one replica lists its own
// records from memory.
func (e *embedded) AddRecords(context.Context, []Record) error { return nil }

func (e *embedded) Records(context.Context, string, int) ([][]byte, error) { return nil, nil }

func (e *embedded) Sweep(_ context.Context, now time.Time) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	for k, exp := range e.redeemed {
		if now.After(exp) {
			delete(e.redeemed, k)
		}
	}
	for w := range e.used {
		if now.Sub(w.start) > 2*time.Minute {
			delete(e.used, w)
		}
	}
	return nil
}

func (e *embedded) Ping(context.Context) error { return nil }
func (e *embedded) Shared() bool               { return false }
func (e *embedded) Close() error               { return nil }
