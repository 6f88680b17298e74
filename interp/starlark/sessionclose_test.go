package starlark_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
)

// TestSessionCloseStopsRun: closing a session stops the run in progress
// in it (stopped: killed, saying the session was closed) rather than
// waiting for the run's wall clock, and refuses the run waiting its turn.
func TestSessionCloseStopsRun(t *testing.T) {
	tier := newTier(t)
	s, err := tier.OpenSession(context.Background(), airlock.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	long := job("n = 0\nfor i in range(1 << 40):\n    n += 1")
	long.Limits = airlock.Limits{WallMS: 10_000, Steps: 10_000_000_000}
	first, second := make(chan error, 1), make(chan error, 1)
	go func() { _, err := s.Run(context.Background(), long); first <- err }()
	time.Sleep(300 * time.Millisecond) // the first run holds the session
	go func() { _, err := s.Run(context.Background(), long); second <- err }()
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Close took %v: it waited for the run", d)
	}
	err = <-first
	if st, ok := airlock.AsStop(err); !ok || st.Reason != airlock.StopKilled || !strings.Contains(st.Detail, "closed") {
		t.Errorf("the run in progress: want stopped: killed by the close, got %v", err)
	}
	if err := <-second; airlock.KindOf(err) != airlock.ErrNotAdmitted || !strings.Contains(err.Error(), "closed") {
		t.Errorf("the run waiting its turn: want refused as the session is closed, got %v", err)
	}
}
