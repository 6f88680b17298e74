package server_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/testing/tiertest"
	"github.com/airlock-sandbox/airlock/server"
)

// TestGVisorSessionStops: through the API, a run in a gVisor session
// stopped by its wall clock, or by the client hanging up, ends that run
// only: the next run finds the scratch. A stop that loses the sandbox
// (memory) ends the session: its next run is refused saying so and why,
// GET /v1/sessions shows it ended, and it no longer holds one of the
// tenant's max_sessions.
func TestGVisorSessionStops(t *testing.T) {
	f := newFixture(t, func(c *server.Config) { c.MaxSessions = 1 })
	if err := f.srv.Router().Unavailable("gvisor"); err != nil {
		tiertest.Unavailable(t, "gvisor", err)
	}
	open := func() string {
		t.Helper()
		var o struct{ ID, Tier string }
		r := f.do("POST", "/v1/sessions", keyA, `{"job":{"kind":"command","argv":["true"]}}`)
		r.decode(t, &o)
		if r.status != 201 || o.Tier != "gvisor" {
			t.Fatalf("open: %d %s", r.status, r.body)
		}
		t.Cleanup(func() { f.do("DELETE", "/v1/sessions/"+o.ID, keyA, nil) })
		return o.ID
	}
	id := open()
	path := "/v1/sessions/" + id + "/run"
	r := f.do("POST", path, keyA, `{"kind":"command","argv":["sh","-c","echo kept > note; sleep 100"],"limits":{"wall_ms":1500},"grants":{"spawn":true}}`)
	if res := r.result(t); res.Stopped == nil || res.Stopped.Reason != airlock.StopTimeout {
		t.Fatalf("want stopped: timeout, got %d %s", r.status, r.body)
	}
	if res := f.do("POST", path, keyA, `{"kind":"command","argv":["cat","note"]}`).result(t); res.Stdout != "kept\n" {
		t.Fatalf("after a timeout: want the scratch kept, got %+v", res)
	}

	// The client hangs up during a run.
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", f.http.URL+path, strings.NewReader(`{"kind":"command","argv":["sleep","100"],"limits":{"wall_ms":5000}}`))
	req.Header.Set("Authorization", "Bearer "+keyA)
	start := time.Now()
	if resp, err := f.http.Client().Do(req); err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("the hung-up run answered: %s %s", resp.Status, body)
	}
	if res := f.do("POST", path, keyA, `{"kind":"command","argv":["cat","note"]}`).result(t); res.Stdout != "kept\n" {
		t.Fatalf("after the client hung up: want the scratch kept, got %+v", res)
	}
	// The hang-up stopped the run: the next did not wait for its 5 s
	// wall clock.
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("the next run ended %v after the hung-up one began: the hang-up did not stop it", d)
	}

	// A memory stop that loses the sandbox ends the session.
	r = f.do("POST", path, keyA, `{"kind":"command","argv":["perl","-e","my $x = q(a) x (200 << 20)"],"limits":{"memory_mb":64,"wall_ms":5000}}`)
	if res := r.result(t); res.Stopped == nil || res.Stopped.Reason != airlock.StopMemory {
		t.Fatalf("want stopped: memory, got %d %s", r.status, r.body)
	}
	r = f.do("POST", path, keyA, `{"kind":"command","argv":["cat","note"]}`)
	res := r.result(t)
	if res.Error == nil {
		t.Logf("the memory stop left the sandbox standing: %+v", res)
		return
	}
	if r.status != http.StatusForbidden || res.Error.Kind != airlock.ErrNotAdmitted || !strings.Contains(res.Error.Message, "ended") || !strings.Contains(res.Error.Message, "memory") {
		t.Fatalf("after the session's sandbox was lost: want a refusal saying it ended and why, got %d %s", r.status, r.body)
	}
	var list []struct{ ID, Ended string }
	f.do("GET", "/v1/sessions", keyA, nil).decode(t, &list)
	if len(list) != 1 || list[0].ID != id || !strings.Contains(list[0].Ended, "memory") {
		t.Errorf("GET /v1/sessions does not show the session ended: %+v", list)
	}
	// The ended session no longer holds the tenant's only session.
	open()
}

// TestSessionConcurrentRuns: two runs sent to one session at once run one
// after the other, each with its own output; while they do,
// GET /v1/sessions shows them running and the session not idle; closing
// the session stops the run in progress.
func TestSessionConcurrentRuns(t *testing.T) {
	f := newFixture(t, func(c *server.Config) { c.Tenants[0].Limits.Max.Steps = 1 << 40 })
	var open struct{ ID string }
	if r := f.do("POST", "/v1/sessions", keyA, `{"tier":"starlark"}`); r.status != 201 {
		t.Fatalf("open: %d %s", r.status, r.body)
	} else {
		r.decode(t, &open)
	}
	path := "/v1/sessions/" + open.ID + "/run"
	job := func(tag string) string {
		return `{"kind":"starlark","code":"for i in range(300000):\n    if i % 1000 == 0:\n        print('` + tag + `')","limits":{"wall_ms":5000,"steps":10000000000}}`
	}
	results := make(chan airlock.Result, 2)
	for _, tag := range []string{"AAAA", "BBBB"} {
		go func() { results <- f.do("POST", path, keyA, job(tag)).result(t) }()
	}
	time.Sleep(100 * time.Millisecond)
	var list []struct {
		ID      string
		Running int
		Idle    string
	}
	f.do("GET", "/v1/sessions", keyA, nil).decode(t, &list)
	if len(list) != 1 || list[0].Running == 0 || list[0].Idle != "0s" {
		t.Errorf("GET /v1/sessions during two runs: %+v", list)
	}
	for range 2 {
		res := <-results
		if res.Error != nil || res.Stopped != nil {
			t.Fatalf("a concurrent run: %+v", res)
		}
		lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
		if len(lines) != 300 {
			t.Errorf("a run printed %d lines, want 300", len(lines))
		}
		for _, l := range lines {
			if l != lines[0] {
				t.Fatalf("a run's output holds another run's: %q and %q", lines[0], l)
			}
		}
	}

	// Closing the session stops the run in progress.
	long := `{"kind":"starlark","code":"x = 0\nfor i in range(1 << 40):\n    x += 1","limits":{"wall_ms":5000,"steps":10000000000}}`
	done := make(chan reply, 1)
	go func() { done <- f.do("POST", path, keyA, long) }()
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	if r := f.do("DELETE", "/v1/sessions/"+open.ID, keyA, nil); r.status != 204 {
		t.Errorf("close: %d %s", r.status, r.body)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("DELETE took %v: it waited for the run", d)
	}
	r := <-done
	if res := r.result(t); res.Stopped == nil || res.Stopped.Reason != airlock.StopKilled {
		t.Errorf("the run in progress when the session closed: %d %s", r.status, r.body)
	}
}
