package tiertest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/airlock-sandbox/airlock"
)

// Recorder is an output sink (airlock.WithOutput) that keeps what it is
// given and checks the sink's contract: chunks never overlap and together
// are exactly the Result's output.
type Recorder struct {
	mu             sync.Mutex
	stdout, stderr bytes.Buffer
	chunks         int
	busy           atomic.Bool
	overlapped     atomic.Bool
	// OnStdout, if set, is called (outside the recorder's lock) with all
	// stdout so far after each stdout chunk.
	OnStdout func(sofar string)
}

// Context returns ctx carrying the recorder as its output sink.
func (r *Recorder) Context(ctx context.Context) context.Context {
	return airlock.WithOutput(ctx, r.sink)
}

func (r *Recorder) sink(stream airlock.Stream, p []byte) {
	if !r.busy.CompareAndSwap(false, true) {
		r.overlapped.Store(true)
	}
	defer r.busy.Store(false)
	r.mu.Lock()
	r.chunks++
	var sofar string
	switch stream {
	case airlock.Stdout:
		r.stdout.Write(p)
		sofar = r.stdout.String()
	case airlock.Stderr:
		r.stderr.Write(p)
	}
	r.mu.Unlock()
	if stream == airlock.Stdout && r.OnStdout != nil {
		r.OnStdout(sofar)
	}
}

// Output returns what the sink was given.
func (r *Recorder) Output() (stdout, stderr string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stdout.String(), r.stderr.String()
}

// Check fails t unless the chunks, never overlapping, add up to res's
// output.
func (r *Recorder) Check(t testing.TB, res airlock.Result) {
	t.Helper()
	if r.overlapped.Load() {
		t.Error("the sink was called concurrently")
	}
	out, errOut := r.Output()
	if out != res.Stdout || errOut != res.Stderr {
		t.Errorf("streamed stdout %q stderr %q, but the result has stdout %q stderr %q", clip(out), clip(errOut), clip(res.Stdout), clip(res.Stderr))
	}
}

func clip(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

// Gated runs job, which must print first on stdout and then wait until
// open has been called before it goes on (it polls for a file open
// creates, say). The recorder calls open once it has seen first, so the
// job finishes only if its output streamed while it ran: a tier that
// passed output only at the end would hold the job until its wall clock
// ran out. Gated checks the chunks against the result and returns it.
func Gated(t testing.TB, tier airlock.Tier, job airlock.Job, first string, open func()) airlock.Result {
	t.Helper()
	var once sync.Once
	opened := make(chan struct{})
	rec := &Recorder{OnStdout: func(sofar string) {
		if strings.Contains(sofar, first) {
			once.Do(func() { open(); close(opened) })
		}
	}}
	res, err := tier.Run(rec.Context(context.Background()), job)
	if err != nil {
		t.Fatalf("gated job: %v (%+v)", err, res)
	}
	select {
	case <-opened:
	default:
		t.Fatalf("the job ended without %q reaching the sink: %+v", first, res)
	}
	rec.Check(t, res)
	return res
}

// ShellGate is a shell job for Gated on tiers that run commands: it
// prints "first" (and a line on stderr), polls in a bounded loop for a
// file in a directory it is granted to read, then prints "second" if the
// file is there ("never opened" if not). open creates the file. The
// directory is world-readable (a sandbox may run as another uid) and
// removed when the test ends.
func ShellGate(t testing.TB) (job airlock.Job, open func()) {
	t.Helper()
	dir, err := os.MkdirTemp("", "airlock-gate-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	gate := filepath.Join(dir, "open")
	script := fmt.Sprintf(`echo first; echo note >&2; i=0; while [ ! -e %s ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; if [ -e %s ]; then echo second; else echo never opened; fi`, gate, gate)
	job = airlock.Job{Kind: airlock.KindCommand, Argv: []string{"sh", "-c", script}}
	job.Grants.Spawn = true // sleep is another program
	job.Grants.FS.Read = []string{dir}
	job.Limits.WallMS = 60_000
	return job, func() {
		if err := os.WriteFile(gate, nil, 0o644); err != nil {
			t.Error(err)
		}
	}
}

// CheckGated checks what a ShellGate job printed.
func CheckGated(t testing.TB, res airlock.Result) {
	t.Helper()
	if res.Stdout != "first\nsecond\n" || res.Stderr != "note\n" || res.ExitCode != 0 {
		t.Fatalf("gated job: %+v", res)
	}
}

// CancelGated is Gated for a tier whose jobs the test cannot signal (a
// pooled sandbox runs no job with a read grant): job prints first and
// then runs for a long, bounded while; the recorder cancels the run once
// it has seen first. The run must end stopped as killed, not on its own
// or by its wall clock, with the chunks equal to the result's output.
func CancelGated(t testing.TB, tier airlock.Tier, job airlock.Job, first string) airlock.Result {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec := &Recorder{OnStdout: func(sofar string) {
		if strings.Contains(sofar, first) {
			cancel()
		}
	}}
	res, err := tier.Run(rec.Context(ctx), job)
	if s, ok := airlock.AsStop(err); !ok || s.Reason != airlock.StopKilled {
		t.Fatalf("want the run cancelled once %q streamed, got %v %+v", first, err, res)
	}
	if !strings.Contains(res.Stdout, first) {
		t.Fatalf("stdout %q lacks %q", res.Stdout, first)
	}
	rec.Check(t, res)
	return res
}
