package starlark_test

import (
	"context"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/testing/tiertest"
)

// TestSessionCloseStopsRun: closing a session stops the run in progress
// in it (stopped: killed, saying the session was closed) rather than
// waiting for the run's wall clock, and refuses the run waiting its turn.
func TestSessionCloseStopsRun(t *testing.T) {
	s, err := newTier(t).OpenSession(context.Background(), airlock.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	long := job("n = 0\nfor i in range(1 << 40):\n    n += 1")
	long.Limits = airlock.Limits{WallMS: 10_000, Steps: 10_000_000_000}
	tiertest.CloseStopsRun(t, s, long, 300*time.Millisecond)
}
