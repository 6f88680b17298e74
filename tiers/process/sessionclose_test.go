package process

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
	forBothTiers(t, func(t *testing.T, tier *Tier, cfg Config) {
		s, err := tier.OpenSession(context.Background(), airlock.SessionOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		long := cmdJob("sleep", "60")
		long.Limits.WallMS = 60_000
		tiertest.CloseStopsRun(t, s, long, time.Second)
	})
}

// TestSessionTTLDuringRun: a TTL timer that fires while a run is in
// progress (it had fired as the run began) does not end the session once
// the run is over: the session was not idle.
func TestSessionTTLDuringRun(t *testing.T) {
	forBothTiers(t, func(t *testing.T, tier *Tier, cfg Config) {
		sess, err := tier.OpenSession(context.Background(), airlock.SessionOptions{TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		defer sess.Close()
		s := sess.(*Session)
		tiertest.TTLDuringRun(t, s, func(sh string) airlock.Job { return cmdJob("sh", "-c", sh) },
			func() { s.timer.Reset(time.Millisecond) })
	})
}
