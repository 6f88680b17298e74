package warmpool

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// proc is a pooled instance: a real sleeping process whose command line
// names the key it was started for.
type proc struct {
	key  string
	cmd  *exec.Cmd
	done chan struct{}
}

// procs starts and destroys sleep processes and counts what lives.
type procs struct {
	t     *testing.T
	live  atomic.Int64
	fail  atomic.Bool // the next starts fail
	mu    sync.Mutex
	pids  map[int]bool // every instance ever started
	delay time.Duration
}

func newProcs(t *testing.T) *procs {
	t.Helper()
	if _, err := exec.LookPath("sleep"); err != nil {
		t.Fatalf("sleep: %v", err) // coreutils: always there
	}
	ps := &procs{t: t, pids: map[int]bool{}}
	t.Cleanup(func() {
		if n := ps.live.Load(); n != 0 {
			t.Errorf("%d instances left running", n)
		}
	})
	return ps
}

func (ps *procs) start(ctx context.Context, key string) (*proc, error) {
	if ps.fail.Load() {
		return nil, errors.New("start refused")
	}
	if ps.delay > 0 {
		select {
		case <-time.After(ps.delay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	// The key is in the process's environment, so the instance itself
	// says which key it was started for.
	cmd := exec.Command("sleep", "300")
	cmd.Env = []string{"POOL_KEY=" + key}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	ps.live.Add(1)
	ps.mu.Lock()
	ps.pids[cmd.Process.Pid] = true
	ps.mu.Unlock()
	p := &proc{key: key, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	return p, nil
}

func (ps *procs) destroy(p *proc) {
	_ = p.cmd.Process.Kill()
	<-p.done
	ps.live.Add(-1)
}

func alive(p *proc) bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// keyOf reads the key the running process was started for from the
// process itself.
func keyOf(t *testing.T, p *proc) string {
	t.Helper()
	// exec(2) closes the close-on-exec pipe that ends cmd.Start before
	// the new image's environment is in place: a process that just
	// started may still show an empty environ for a moment.
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(p.cmd.Process.Pid) + "/environ")
		if err != nil {
			t.Fatalf("instance %d: %v", p.cmd.Process.Pid, err)
		}
		if len(b) > 0 || time.Now().After(deadline) {
			k, _ := strings.CutPrefix(strings.TrimRight(string(b), "\x00"), "POOL_KEY=")
			return k
		}
		time.Sleep(time.Millisecond)
	}
}

func newPool(t *testing.T, ps *procs, o Options[string, *proc]) *Pool[string, *proc] {
	o.Start, o.Alive, o.Destroy = ps.start, alive, ps.destroy
	p := New(o)
	t.Cleanup(p.Close)
	return p
}

func waitFull(t *testing.T, p *Pool[string, *proc], k string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := p.WaitFull(ctx, k); err != nil {
		t.Fatalf("WaitFull(%q): %v (stats %+v)", k, err, p.Stats(k))
	}
}

// TestKeysNeverMix claims from two keys that are both warm: every claim
// gets an instance started for its own key, never the other's.
func TestKeysNeverMix(t *testing.T) {
	ps := newProcs(t)
	p := newPool(t, ps, Options[string, *proc]{})
	p.SetSize("a", 2)
	p.SetSize("b", 3)
	for round := range 3 {
		waitFull(t, p, "a")
		waitFull(t, p, "b")
		claimed := map[*proc]string{}
		claim := func(k string) {
			v, ok := p.Claim(k, nil)
			if !ok {
				t.Fatalf("round %d: claim %q of a full pool missed (stats %+v)", round, k, p.Stats(k))
			}
			if got := keyOf(t, v); got != k {
				t.Fatalf("round %d: claim %q got an instance of %q", round, k, got)
			}
			claimed[v] = k
		}
		claim("a")
		claim("b")
		claim("a")
		// Key a's instances are out (and released only at the end, so
		// none is replaced yet) while b still has two ready: a's next
		// claim must miss rather than take one of b's.
		if v, ok := p.Claim("a", nil); ok {
			t.Fatalf("round %d: key a served a third claim from 2 instances (%s)", round, keyOf(t, v))
		}
		claim("b")
		claim("b")
		for v, k := range claimed {
			p.Release(k, v)
		}
	}
	sa, sb := p.Stats("a"), p.Stats("b")
	if sa.Hits != 6 || sb.Hits != 9 || sa.Misses != 3 || sb.Misses != 0 || sa.Size != 2 || sb.Size != 3 {
		t.Fatalf("stats a %+v, b %+v", sa, sb)
	}
	if st := p.Stats("none"); st != (Stats{}) {
		t.Fatalf("stats of an unknown key: %+v", st)
	}
}

// TestNeverReused checks that a released instance is destroyed and never
// handed out again.
func TestNeverReused(t *testing.T) {
	ps := newProcs(t)
	p := newPool(t, ps, Options[string, *proc]{})
	p.SetSize("k", 1)
	seen := map[int]bool{}
	for range 4 {
		waitFull(t, p, "k")
		v, ok := p.Claim("k", nil)
		if !ok {
			t.Fatal("claim of a full pool missed")
		}
		pid := v.cmd.Process.Pid
		if seen[pid] {
			t.Fatalf("instance %d handed out twice", pid)
		}
		seen[pid] = true
		p.Release("k", v)
		waitFull(t, p, "k") // waits for the destruction too
		if alive(v) {
			t.Fatalf("released instance %d still runs after WaitFull", pid)
		}
	}
}

// TestDeadDiscarded checks that a claim skips (and destroys) an instance
// that died while it waited.
func TestDeadDiscarded(t *testing.T) {
	ps := newProcs(t)
	p := newPool(t, ps, Options[string, *proc]{})
	p.SetSize("k", 2)
	waitFull(t, p, "k")
	ready := p.Ready("k")
	_ = ready[0].cmd.Process.Kill()
	<-ready[0].done
	v, ok := p.Claim("k", nil)
	if !ok || v != ready[1] {
		t.Fatalf("claim got %v, %v; want the live instance", v, ok)
	}
	p.Release("k", v)
	if _, ok := p.Claim("k", nil); ok {
		t.Fatal("a claim after the only live one was taken hit")
	}
}

// TestFits checks that a claim takes only an instance its predicate
// accepts and counts a miss otherwise.
func TestFits(t *testing.T) {
	ps := newProcs(t)
	p := newPool(t, ps, Options[string, *proc]{})
	p.SetSize("k", 1)
	waitFull(t, p, "k")
	if _, ok := p.Claim("k", func(*proc) bool { return false }); ok {
		t.Fatal("claim took an instance its predicate refused")
	}
	if st := p.Stats("k"); st.Misses != 1 || st.Ready != 1 {
		t.Fatalf("refused claim: stats %+v, want one miss and the instance still ready", st)
	}
	v, ok := p.Claim("k", func(*proc) bool { return true })
	if !ok {
		t.Fatal("claim of an accepted instance missed")
	}
	p.Release("k", v)
}

// TestStartError checks that WaitErr surfaces a failed start once, that
// a later wait tries again, and that Backoff retries by itself.
func TestStartError(t *testing.T) {
	ps := newProcs(t)
	ps.fail.Store(true)
	p := newPool(t, ps, Options[string, *proc]{WaitErr: true})
	p.SetSize("k", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.WaitFull(ctx, "k"); err == nil || !strings.Contains(err.Error(), "start refused") {
		t.Fatalf("WaitFull with failing starts: %v", err)
	}
	if st := p.Stats("k"); st.Failed == 0 || st.LastErr == nil {
		t.Fatalf("stats %+v, want the failure recorded", st)
	}
	ps.fail.Store(false)
	waitFull(t, p, "k")
	if st := p.Stats("k"); st.LastErr != nil || st.Created != 1 {
		t.Fatalf("stats %+v after a success", st)
	}

	ps2 := newProcs(t)
	ps2.fail.Store(true)
	q := newPool(t, ps2, Options[string, *proc]{Backoff: 50 * time.Millisecond})
	q.SetSize("k", 1)
	for q.Stats("k").Failed < 2 {
		time.Sleep(10 * time.Millisecond) // a test timeout ends a pool that never retries
	}
	ps2.fail.Store(false)
	waitFull(t, q, "k")
}

// TestTTL checks that ready instances older than the TTL are replaced.
func TestTTL(t *testing.T) {
	ps := newProcs(t)
	p := newPool(t, ps, Options[string, *proc]{TTL: 200 * time.Millisecond})
	p.SetSize("k", 1)
	waitFull(t, p, "k")
	first := p.Ready("k")[0]
	deadline := time.Now().Add(10 * time.Second)
	for p.Stats("k").Expired == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no expiry: %+v", p.Stats("k"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitFull(t, p, "k")
	if r := p.Ready("k"); r[0] == first || alive(first) {
		t.Fatal("the expired instance was not replaced and destroyed")
	}
}

// TestRefillDelay checks that a claim's replacement waits for Done, or
// RefillDelay at most.
func TestRefillDelay(t *testing.T) {
	ps := newProcs(t)
	p := newPool(t, ps, Options[string, *proc]{RefillDelay: 400 * time.Millisecond})
	p.SetSize("k", 1)
	waitFull(t, p, "k")
	v, _ := p.Claim("k", nil)
	time.Sleep(150 * time.Millisecond)
	if st := p.Stats("k"); st.Ready != 0 || st.Created != 1 {
		t.Fatalf("replacement started while the job ran: %+v", st)
	}
	p.Done("k")
	waitFull(t, p, "k")
	ps.destroy(v)

	v, _ = p.Claim("k", nil) // no Done: the delay bounds the hold
	start := time.Now()
	waitFull(t, p, "k")
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Fatalf("replacement after %v, before the refill delay", d)
	}
	ps.destroy(v)
}

// TestNoRefillOnHit checks that without RefillDelay a hit starts nothing
// until the job asks (Done), and that a miss starts at once.
func TestNoRefillOnHit(t *testing.T) {
	ps := newProcs(t)
	p := newPool(t, ps, Options[string, *proc]{})
	p.SetSize("k", 1)
	waitFull(t, p, "k")
	v, _ := p.Claim("k", nil)
	time.Sleep(100 * time.Millisecond)
	if st := p.Stats("k"); st.Created != 1 {
		t.Fatalf("a hit started a replacement: %+v", st)
	}
	p.Done("k")
	waitFull(t, p, "k")
	ps.destroy(v)
}

// TestAfterEnd checks that a released instance is destroyed only once
// AfterEnd lets it, and that WaitFull waits for that.
func TestAfterEnd(t *testing.T) {
	ps := newProcs(t)
	ended := make(chan func(), 1)
	o := Options[string, *proc]{AfterEnd: func(v *proc, f func()) { ended <- f }}
	p := newPool(t, ps, o)
	p.SetSize("k", 1)
	waitFull(t, p, "k")
	v, _ := p.Claim("k", nil)
	p.Release("k", v)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := p.WaitFull(ctx, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitFull before the released instance ended: %v", err)
	}
	if !alive(v) {
		t.Fatal("destroyed before AfterEnd allowed it")
	}
	(<-ended)()
	waitFull(t, p, "k")
	if alive(v) {
		t.Fatal("not destroyed")
	}
}

// TestClose checks that Close destroys the ready instances, waits for a
// running start and leaves the pool refusing claims.
func TestClose(t *testing.T) {
	ps := newProcs(t)
	p := newPool(t, ps, Options[string, *proc]{})
	p.SetSize("a", 2)
	p.SetSize("b", 1)
	waitFull(t, p, "a")
	waitFull(t, p, "b")
	v, _ := p.Claim("a", nil)
	p.Release("a", v) // its replacement may be starting while Close runs
	p.Close()
	if n := ps.live.Load(); n != 0 {
		t.Fatalf("%d instances run after Close", n)
	}
	if _, ok := p.Claim("a", nil); ok {
		t.Fatal("a closed pool handed out an instance")
	}
	if err := p.WaitFull(context.Background(), "a"); !errors.Is(err, ErrClosed) {
		t.Fatalf("WaitFull on a closed pool: %v", err)
	}
	p.Close()
}

// TestConcurrentClaims races claims and releases of two keys against the
// filler (run with -race).
func TestConcurrentClaims(t *testing.T) {
	ps := newProcs(t)
	p := newPool(t, ps, Options[string, *proc]{Parallel: 2})
	p.SetSize("a", 2)
	p.SetSize("b", 2)
	var wg sync.WaitGroup
	var seenMu sync.Mutex
	seen := map[*proc]bool{}
	for i := range 6 {
		k := []string{"a", "b"}[i%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				v, ok := p.Claim(k, nil)
				if !ok {
					p.Done(k)
					time.Sleep(5 * time.Millisecond)
					continue
				}
				seenMu.Lock()
				dup := seen[v]
				seen[v] = true
				seenMu.Unlock()
				if dup || v.key != k {
					t.Errorf("claim %q: instance of %q, handed out before: %v", k, v.key, dup)
				}
				p.Done(k)
				p.Release(k, v)
			}
		}()
	}
	wg.Wait()
}

// TestRefillDelayStaleDone checks that a Done reported while the pool was
// full does not let the next claim's replacement start during its job.
func TestRefillDelayStaleDone(t *testing.T) {
	ps := newProcs(t)
	p := newPool(t, ps, Options[string, *proc]{RefillDelay: time.Second})
	p.SetSize("k", 1)
	waitFull(t, p, "k")
	p.Done("k") // no claim is running: nothing to start
	v, _ := p.Claim("k", nil)
	time.Sleep(200 * time.Millisecond)
	if st := p.Stats("k"); st.Created != 1 {
		t.Fatalf("replacement started while the job ran: %+v", st)
	}
	p.Done("k")
	waitFull(t, p, "k")
	ps.destroy(v)
}

// TestOrder checks that claims take the oldest ready instance, or with
// Newest the newest.
func TestOrder(t *testing.T) {
	for _, newest := range []bool{false, true} {
		ps := newProcs(t)
		p := newPool(t, ps, Options[string, *proc]{Newest: newest})
		p.SetSize("k", 3)
		waitFull(t, p, "k")
		ready := p.Ready("k")
		want := ready[0]
		if newest {
			want = ready[len(ready)-1]
		}
		v, ok := p.Claim("k", nil)
		if !ok || v != want {
			t.Fatalf("Newest %v: claimed %v, want %v", newest, v, want)
		}
		p.Release("k", v)
		p.Close()
	}
}
