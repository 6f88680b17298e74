package gvisor

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/testing/tiertest"
)

// sessionEnded reports whether err is the refusal a session's run gets
// once the session is over: not admitted, saying the session ended.
func sessionEnded(err error) bool {
	return airlock.KindOf(err) == airlock.ErrNotAdmitted && strings.Contains(err.Error(), "session") &&
		!strings.Contains(err.Error(), "\n")
}

// TestSessionSurvivesStoppedRun: a run stopped by a limit or a
// cancellation ends that run's processes only; the session's sandbox goes
// on, with its scratch, and the next run works. Each stop reason is tried
// in a session of its own, with a daemon the stopped run left (setsid)
// that must be gone in the next run.
func TestSessionSurvivesStoppedRun(t *testing.T) {
	tier := newTier(t, NewConfig())
	// The program leaves a mark in the scratch and a detached daemon
	// behind, then does what gets it stopped.
	prelude := "echo kept > k.txt; setsid sh -c 'while :; do sleep 1; done' </dev/null >/dev/null 2>&1 & echo started; "
	cases := []struct {
		name   string
		script string
		limits airlock.Limits
		cancel time.Duration // cancel the run's context after this long
		want   airlock.StopReason
		// mayEnd: the stop can take the sandbox down with it (the host's
		// OOM killer or pids limit hits the sandbox's own processes, not
		// only the program's): the session may end, and then says so.
		mayEnd bool
	}{
		{name: "timeout", script: "while :; do :; done", limits: airlock.Limits{WallMS: 1500}, want: airlock.StopTimeout},
		{name: "output", script: "while :; do echo 0123456789abcdef; done", limits: airlock.Limits{OutputBytes: 4096, WallMS: 20_000}, want: airlock.StopOutput},
		{name: "cpu", script: "while :; do :; done", limits: airlock.Limits{CPUMS: 500, WallMS: 20_000}, want: airlock.StopCPU},
		{name: "memory", script: "perl -e 'my $x = q(a) x (200 << 20); print qq(survived\n)'", limits: airlock.Limits{MemoryMB: 64, WallMS: 30_000}, want: airlock.StopMemory, mayEnd: true},
		{name: "pids", script: "f() { f | f & }; f; while :; do :; done", limits: airlock.Limits{WallMS: 30_000}, want: airlock.StopPids, mayEnd: true},
		{name: "cancel", script: "sleep 100", limits: airlock.Limits{WallMS: 20_000}, cancel: 1500 * time.Millisecond, want: airlock.StopKilled},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := tier.OpenSession(context.Background(), airlock.SessionOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			j := cmdJob("sh", "-c", prelude+c.script)
			j.Limits = c.limits
			ctx := context.Background()
			if c.cancel > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, c.cancel)
				defer cancel()
			}
			start := time.Now()
			res, err := s.Run(ctx, j)
			st, ok := airlock.AsStop(err)
			if !ok || st.Reason != c.want {
				t.Fatalf("want stopped: %s, got %v (%+v)", c.want, err, res)
			}
			if !strings.HasPrefix(res.Stdout, "started\n") {
				t.Errorf("the stopped run's output so far was lost: %q", res.Stdout)
			}
			if d := time.Since(start); d > 15*time.Second {
				t.Errorf("the stopped run took %v to return", d)
			}
			res, err = s.Run(context.Background(), cmdJob("sh", "-c", "cat k.txt; ps -e -o comm= 2>/dev/null | grep -c sleep"))
			if c.mayEnd && err != nil {
				// The session is over: the refusal says so, and why, on
				// one line, and nothing of its sandbox is left.
				if !sessionEnded(err) || !strings.Contains(err.Error(), string(c.want)) {
					t.Fatalf("after a stop (%s) that ended the session: want a refusal saying it ended and why, got %v", c.want, err)
				}
				t.Logf("the stop ended the session: %v", err)
				if why := s.(interface{ Ended() string }).Ended(); !strings.Contains(why, string(c.want)) {
					t.Errorf("Ended() = %q, want why the session ended", why)
				}
				tier.bg.Wait()
				if out, err := tier.runscOut(context.Background(), "list", "-quiet"); err != nil || strings.TrimSpace(string(out)) != "" {
					t.Errorf("the ended session's sandbox is left: %q (%v)", out, err)
				}
				return
			}
			if why := s.(interface{ Ended() string }).Ended(); why != "" {
				t.Errorf("a session that goes on says it ended: %q", why)
			}
			if err != nil {
				t.Fatalf("the session's next run after a stop (%s) failed: %v (%+v)", c.want, err, res)
			}
			if res.Stdout != "kept\n0\n" {
				t.Errorf("next run: want the scratch kept and no process of the stopped run, got %q", res.Stdout)
			}
		})
	}
}

// TestSessionRunBelowScratch: a run whose memory limit is below what the
// session's sandbox already holds (its scratch lives in the sandbox's
// memory) is refused before anything of it runs, saying why; the session
// goes on with its scratch.
func TestSessionRunBelowScratch(t *testing.T) {
	s := openSession(t, airlock.SessionOptions{})
	fill := cmdJob("sh", "-c", "head -c 150000000 /dev/zero > big; echo kept > k.txt")
	fill.Limits.MemoryMB = 512
	if res, err := s.Run(context.Background(), fill); err != nil {
		t.Fatalf("filling the scratch: %v (%+v)", err, res)
	}
	small := cmdJob("sh", "-c", "echo ran")
	small.Limits.MemoryMB = 48
	res, err := s.Run(context.Background(), small)
	if airlock.KindOf(err) != airlock.ErrNotAdmitted || !strings.Contains(err.Error(), "memory") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("a run below the session's memory in use: want a one-line refusal naming memory, got %v (%+v)", err, res)
	}
	res, err = s.Run(context.Background(), cmdJob("sh", "-c", "cat k.txt"))
	if err != nil || res.Stdout != "kept\n" {
		t.Fatalf("after the refusal: want the session and its scratch kept, got %v (%+v)", err, res)
	}
}

// TestSessionCloseStopsRun: closing a session stops the run in progress
// in it (stopped: killed, saying the session was closed) rather than
// waiting for the run's wall clock, and refuses the run waiting its turn.
func TestSessionCloseStopsRun(t *testing.T) {
	long := cmdJob("sleep", "60")
	long.Limits.WallMS = 60_000
	tiertest.CloseStopsRun(t, openSession(t, airlock.SessionOptions{}), long, time.Second)
}

// TestSessionTTLDuringRun: a TTL timer that fires while a run is in
// progress (it had fired as the run began) does not end the session once
// the run is over: the session was not idle.
func TestSessionTTLDuringRun(t *testing.T) {
	s := openSession(t, airlock.SessionOptions{TTL: time.Hour}).(*session)
	tiertest.TTLDuringRun(t, s, func(sh string) airlock.Job { return cmdJob("sh", "-c", sh) },
		func() { s.timer.Reset(time.Millisecond) })
}

// TestSessionSandboxDiesIdle: a session whose sandbox died between runs
// (killed from outside, as the host's OOM killer might) answers its next
// run with a one-line refusal saying the session ended and why, and
// leaves nothing of the sandbox behind.
func TestSessionSandboxDiesIdle(t *testing.T) {
	tier := newTier(t, NewConfig())
	sess, err := tier.OpenSession(context.Background(), airlock.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	if _, err := sess.Run(context.Background(), cmdJob("true")); err != nil {
		t.Fatal(err)
	}
	id := sess.(*session).sb.id
	if out, err := tier.runscOut(context.Background(), "kill", id, "KILL"); err != nil {
		t.Fatalf("killing the sandbox: %v: %s", err, out)
	}
	time.Sleep(500 * time.Millisecond)
	_, err = sess.Run(context.Background(), cmdJob("true"))
	if !sessionEnded(err) || !strings.Contains(err.Error(), "sandbox") {
		t.Fatalf("a run after the session's sandbox died: want a refusal saying the session ended and why, got %v", err)
	}
	t.Logf("refused: %v", err)
	if _, err := sess.Run(context.Background(), cmdJob("true")); !sessionEnded(err) {
		t.Fatalf("the run after: want the same refusal, got %v", err)
	}
	tier.bg.Wait()
	if out, err := tier.runscOut(context.Background(), "list", "-quiet"); err != nil || strings.TrimSpace(string(out)) != "" {
		t.Errorf("the dead session's sandbox is left: %q (%v)", out, err)
	}
}

// TestSessionAgentDoesNotStop: a stopped run whose agent does not answer
// the Kill frame (the sandbox frozen) is given up after stopGrace: the
// run returns its stop, the sandbox is destroyed, and the session's next
// run is refused saying the session ended and why.
func TestSessionAgentDoesNotStop(t *testing.T) {
	tier := newTier(t, NewConfig())
	sess, err := tier.OpenSession(context.Background(), airlock.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	id := sess.(*session).sb.id
	go func() {
		time.Sleep(500 * time.Millisecond)
		if out, err := tier.runscOut(context.Background(), "pause", id); err != nil {
			t.Errorf("pausing the sandbox: %v: %s", err, out)
		}
	}()
	j := cmdJob("sleep", "60")
	j.Limits.WallMS = 1500
	start := time.Now()
	_, err = sess.Run(context.Background(), j)
	if st, ok := airlock.AsStop(err); !ok || st.Reason != airlock.StopTimeout {
		t.Fatalf("want stopped: timeout, got %v", err)
	}
	if d := time.Since(start); d > 1500*time.Millisecond+stopGrace+5*time.Second {
		t.Errorf("the run returned after %v", d)
	}
	_, err = sess.Run(context.Background(), cmdJob("true"))
	if !sessionEnded(err) || !strings.Contains(err.Error(), "timeout") {
		t.Fatalf("after the agent did not stop the run: want a refusal saying the session ended and why, got %v", err)
	}
	t.Logf("refused: %v", err)
	tier.bg.Wait()
	if out, err := tier.runscOut(context.Background(), "list", "-quiet"); err != nil || strings.TrimSpace(string(out)) != "" {
		t.Errorf("the session's sandbox is left: %q (%v)", out, err)
	}
}
