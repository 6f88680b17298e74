package tiertest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
)

// CloseStopsRun checks that closing s stops the run in progress in it
// (stopped: killed, saying the session was closed) rather than waiting
// for the run's wall clock, and refuses the run waiting its turn (not
// admitted, in one line, saying the session is closed). long must run far
// longer than the check waits (held: how long it takes to hold the
// session once started).
func CloseStopsRun(t *testing.T, s airlock.Session, long airlock.Job, held time.Duration) {
	t.Helper()
	first, second := make(chan error, 1), make(chan error, 1)
	go func() { _, err := s.Run(context.Background(), long); first <- err }()
	time.Sleep(held) // the first run holds the session
	go func() { _, err := s.Run(context.Background(), long); second <- err }()
	time.Sleep(held / 3)
	start := time.Now()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("Close took %v: it waited for the run", d)
	}
	err := <-first
	if st, ok := airlock.AsStop(err); !ok || st.Reason != airlock.StopKilled || !strings.Contains(st.Detail, "closed") {
		t.Errorf("the run in progress: want stopped: killed by the close, got %v", err)
	}
	if err := <-second; airlock.KindOf(err) != airlock.ErrNotAdmitted || !strings.Contains(err.Error(), "closed") || strings.Contains(err.Error(), "\n") {
		t.Errorf("the run waiting its turn: want refused in one line as the session is closed, got %v", err)
	}
}

// TTLDuringRun checks that an idle timer that fires while a run is in
// progress (fire makes s's timer fire at once, as if it had fired as the
// run began) does not end the session once the run is over: the session
// was not idle, and its scratch is kept.
func TTLDuringRun(t *testing.T, s airlock.Session, sh func(script string) airlock.Job, fire func()) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := s.Run(context.Background(), sh("echo kept > k.txt; sleep 2"))
		done <- err
	}()
	time.Sleep(time.Second)
	fire()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	res, err := s.Run(context.Background(), sh("cat k.txt"))
	if err != nil || res.Stdout != "kept\n" {
		t.Fatalf("the run after: want the session open, got %v (%+v)", err, res)
	}
}
