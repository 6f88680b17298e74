package gvisor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/corpus"
	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
	"github.com/airlock-sandbox/airlock/internal/testing/tiertest"
)

// newTier builds a tier in a directory of the test's own, skipping (or,
// under CI, failing) when gVisor cannot run here. The tier is closed and
// checked for leftovers when the test ends.
func newTier(t testing.TB, cfg Config) *Tier {
	t.Helper()
	tier, err := New(cfg.WithDir(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	if err := tier.Available(); err != nil {
		tiertest.Unavailable(t, Name, err)
	}
	t.Cleanup(func() {
		tier.Close()
		checkNoLeftovers(t, tier)
	})
	return tier
}

// checkNoLeftovers fails if the tiers, all closed and sharing one
// directory, left a sandbox, a sandbox directory, a root, a lock file, a
// mount, a runsc process or a cgroup behind.
// unused reports whether no tier holds the shared root at path.
func unused(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil
}

func checkNoLeftovers(t testing.TB, tiers ...*Tier) {
	t.Helper()
	tier := tiers[0]
	if out, err := tier.runscOut(context.Background(), "list", "-quiet"); err != nil {
		t.Errorf("runsc list: %v", err)
	} else if s := strings.TrimSpace(string(out)); s != "" {
		t.Errorf("sandboxes left running: %s", s)
	}
	for _, d := range []string{"sb", "roots", "owners"} {
		entries, _ := os.ReadDir(filepath.Join(tier.base, d))
		for _, e := range entries {
			// A shared root stays for the directory's next tier, unused.
			if p := filepath.Join(tier.base, d, e.Name()); d == "roots" && strings.HasPrefix(e.Name(), sharedRootPrefix) {
				if !unused(p) {
					t.Errorf("shared root %s still held", p)
				}
				continue
			}
			t.Errorf("left behind in %s/: %s", d, e.Name())
		}
	}
	if data, err := os.ReadFile("/proc/self/mountinfo"); err == nil && strings.Contains(string(data), tier.base) {
		t.Errorf("mounts left under %s", tier.base)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if data, err := os.ReadFile(p); err == nil && strings.Contains(string(data), tier.state) {
			t.Errorf("runsc process left running: %s", strings.ReplaceAll(string(data), "\x00", " "))
		}
	}
	prefixes := []string{idPrefix + itoa(os.Getpid()) + "-"}
	for _, tr := range tiers {
		if tr.owner != "" {
			prefixes = append(prefixes, tr.owner+"-")
		}
	}
	hier, _ := os.ReadDir(cgroupRoot)
	for _, h := range hier {
		groups, _ := os.ReadDir(filepath.Join(cgroupRoot, h.Name()))
		for _, g := range groups {
			for _, p := range prefixes {
				if strings.HasPrefix(g.Name(), p) {
					t.Errorf("cgroup left behind: %s/%s", h.Name(), g.Name())
					break
				}
			}
		}
	}
}

// cmdJob is a command job granted spawn: the tests' shell scripts run
// other programs (a withheld grant is the contract tests' and the corpus's
// subject).
func cmdJob(argv ...string) airlock.Job {
	return airlock.Job{Kind: airlock.KindCommand, Argv: argv, Grants: airlock.Grants{Spawn: true}}
}

// warm waits (through WaitWarm) until the pool holds its configured number
// of ready sandboxes.
func warm(t testing.TB, tier *Tier) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := tier.WaitWarm(ctx); err != nil {
		t.Fatalf("pool did not fill: %v %+v", err, tier.Stats())
	}
	if st := tier.Stats(); st.Ready != st.Size {
		t.Fatalf("WaitWarm returned with %d of %d sandboxes ready", st.Ready, st.Size)
	}
}

func suite(tier *Tier) tiertest.Suite {
	spin := cmdJob("sh", "-c", "while :; do :; done")
	flood := cmdJob("sh", "-c", "yes flood")
	env := cmdJob("sh", "-c", "echo \"$"+tiertest.CanaryEnv+"\"; env; cat /proc/1/environ")
	bulk := cmdJob("head", "-c", "60000", "/dev/zero")
	return tiertest.Suite{
		Tier: tier,
		OK:   cmdJob("sh", "-c", "echo ok"),
		Check: func(t testing.TB, res airlock.Result) {
			if res.Stdout != "ok\n" {
				t.Errorf("stdout %q, want %q", res.Stdout, "ok\n")
			}
		},
		Spin:        &spin,
		Flood:       &flood,
		Env:         &env,
		Bulk:        &bulk,
		BulkBytes:   60_000,
		Concurrency: 4,
		OKWall:      2 * time.Minute,
	}
}

// runSuite runs the conformance suite, and checks once more that the tier
// holds no more goroutines than before its first job.
func runSuite(t *testing.T, tier *Tier) {
	s := suite(tier)
	before := runtime.NumGoroutine()
	s.Run(t)
	tiertest.NoGoroutineLeak(t, before)
}

func TestConformance(t *testing.T) {
	runSuite(t, newTier(t, NewConfig()))
}

func TestConformancePooled(t *testing.T) {
	tier := newTier(t, NewConfig().WithPool(2, 2))
	warm(t, tier)
	runSuite(t, tier)
	if st := tier.Stats(); st.Hits == 0 {
		t.Fatalf("no job was served from the pool: %+v", st)
	}
}

// canaries plants what the corpus's attack cases look for: a host file, a
// host environment variable, a loopback HTTP sink, a host Unix socket and
// an abstract one. It returns the variables for corpus.Case.Run, the
// secrets no result may contain, and a function reporting contact with the
// sinks.
func canaries(t *testing.T) (vars map[string]string, secrets []string, contacted func() string) {
	t.Helper()
	dir := t.TempDir()
	secret := fmt.Sprintf("airlock-secret-%d", time.Now().UnixNano())
	file := filepath.Join(dir, "airlock-canary.txt")
	if err := os.WriteFile(file, []byte(secret), 0o644); err != nil {
		t.Fatal(err)
	}
	envSecret := secret + "-env"
	t.Setenv("AIRLOCK_CANARY_ENV", envSecret)

	var hits atomic.Int64
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprint(w, secret+"-http")
	}))
	t.Cleanup(sink.Close)

	var conns atomic.Int64
	listen := func(addr string) {
		ln, err := net.Listen("unix", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				conns.Add(1)
				c.Close()
			}
		}()
	}
	sock := filepath.Join(dir, "host.sock")
	listen(sock)
	abstract := fmt.Sprintf("airlock-canary-%d", time.Now().UnixNano())
	listen("@" + abstract)

	var uts syscall.Utsname
	_ = syscall.Uname(&uts)
	release := utsString(uts.Release[:])

	vars = map[string]string{
		"CANARY_FILE":       file,
		"CANARY_ENV":        "AIRLOCK_CANARY_ENV",
		"CANARY_URL":        sink.URL,
		"HOST_SOCKET":       sock,
		"HOST_ABSTRACT":     abstract,
		"STATIC_BINARY_B64": staticBinary(t),
	}
	secrets = []string{secret, envSecret, release}
	contacted = func() string {
		if n := hits.Load(); n > 0 {
			return fmt.Sprintf("the loopback sink was reached %d times", n)
		}
		if n := conns.Load(); n > 0 {
			return fmt.Sprintf("a host Unix socket was reached %d times", n)
		}
		return ""
	}
	return vars, secrets, contacted
}

func utsString(b []int8) string {
	var s strings.Builder
	for _, c := range b {
		if c == 0 {
			break
		}
		s.WriteByte(byte(c))
	}
	return s.String()
}

// runCorpus runs the gvisor and command areas of the corpus on tier.
func runCorpus(t *testing.T, tier airlock.Tier) {
	cases, err := corpus.Load("gvisor", "command")
	if err != nil {
		t.Fatal(err)
	}
	vars, secrets, contacted := canaries(t)
	ran := 0
	for _, c := range cases {
		if !c.Applies(Name) {
			continue
		}
		ran++
		t.Run(c.ID, func(t *testing.T) {
			if why := c.SkipReason(vars); why != "" {
				testenv.Skipf(t, "%s", why)
			}
			v := c.Run(context.Background(), tier, vars, secrets...)
			t.Logf("outcome %s", v.Outcome)
			if !v.Pass {
				t.Errorf("%s: %s (outcome %s)", c.ID, v.Detail, v.Outcome)
			}
		})
	}
	if ran == 0 {
		t.Fatal("no corpus case applies to the tier")
	}
	if msg := contacted(); msg != "" {
		t.Fatal(msg)
	}
}

func TestCorpus(t *testing.T) {
	runCorpus(t, newTier(t, NewConfig()))
}

// TestCorpusPooled runs the corpus through pooled sandboxes, one claim per
// case (the pool is refilled between cases).
func TestCorpusPooled(t *testing.T) {
	tier := newTier(t, NewConfig().WithPool(1, 1))
	warm(t, tier)
	runCorpus(t, &waitingTier{tier})
	if st := tier.Stats(); st.Misses > 0 {
		t.Errorf("some cases ran cold: %+v", st)
	}
}

// waitingTier waits for a ready pooled sandbox before every run, so each
// case runs claimed rather than cold.
type waitingTier struct{ *Tier }

func (w *waitingTier) Run(ctx context.Context, job airlock.Job) (airlock.Result, error) {
	deadline := time.Now().Add(2 * time.Minute)
	for w.Stats().Ready == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	return w.Tier.Run(ctx, job)
}

// TestReadGrant: a granted host directory is readable and read-only; its
// siblings stay invisible. Read grants are mounts, so the job runs cold even
// with a pool.
func TestReadGrant(t *testing.T) {
	tier := newTier(t, NewConfig().WithPool(1, 1))
	base := t.TempDir()
	granted, hidden := filepath.Join(base, "granted"), filepath.Join(base, "hidden")
	for _, d := range []string{granted, hidden} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "f.txt"), []byte(filepath.Base(d)+"-content\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	j := cmdJob("sh", "-c", "cat "+granted+"/f.txt; cat "+hidden+"/f.txt; echo x > "+granted+"/new && echo wrote")
	j.Grants.FS.Read = []string{granted}
	res, err := tier.Run(context.Background(), j)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Stdout, "granted-content") || strings.Contains(res.Stdout, "hidden-content") || strings.Contains(res.Stdout, "wrote") {
		t.Fatalf("read grant not enforced: %+v", res)
	}
	if exists(filepath.Join(granted, "new")) {
		t.Fatal("the job wrote into a read-only grant on the host")
	}
	j.Grants.FS.Read = []string{filepath.Join(base, "missing")}
	if _, err := tier.Run(context.Background(), j); !isInvalid(err) {
		t.Fatalf("a missing read grant: want *airlock.InvalidJob, got %v", err)
	}
}

func isInvalid(err error) bool {
	var inv *airlock.InvalidJob
	return errors.As(err, &inv)
}

// TestAdmit: command jobs only; network grants are admitted (the egress
// gateway enforces them).
func TestAdmit(t *testing.T) {
	tier, err := New(NewConfig().WithDir(t.TempDir()).WithRunsc("/nonexistent/runsc"))
	if err != nil {
		t.Fatal(err)
	}
	if tier.Available() == nil {
		t.Fatal("a missing runsc was not reported")
	}
	job := cmdJob("true")
	if err := tier.Admit(job); err != nil {
		t.Fatalf("command job refused: %v", err)
	}
	var na *airlock.NotAdmitted
	job.Grants.Net = []airlock.NetRule{{Host: "example.com"}}
	if err := tier.Admit(job); err != nil {
		t.Fatalf("net grant refused: %v", err)
	}
	expr := airlock.Job{Kind: airlock.KindExpr, Code: "1+1"}
	if err := tier.Admit(expr); !errors.As(err, &na) {
		t.Fatalf("expr job: want NotAdmitted, got %v", err)
	}
	env := cmdJob("true")
	env.Env = map[string]string{"MODE": "x"}
	if err := tier.Admit(env); err != nil {
		t.Fatalf("env job refused: %v", err)
	}
	if allocs := testing.AllocsPerRun(100, func() { job := cmdJob("true"); _ = tier.Admit(job) }); allocs > 0 {
		t.Fatalf("Admit allocates %.0f times on success", allocs)
	}
	res, err := tier.Run(context.Background(), cmdJob("true"))
	if err == nil || res.Error == nil {
		t.Fatalf("run without runsc: want an error recorded, got %v (%+v)", err, res)
	}
	if _, err := New(NewConfig().WithDir("relative")); err == nil {
		t.Fatal("a relative directory was accepted")
	}
	if _, err := New(NewConfig().WithPool(-1, 1)); err == nil {
		t.Fatal("a negative pool was accepted")
	}
}

// staticBinary is ${STATIC_BINARY_B64}, built as `airlock corpus` builds it.
func staticBinary(t *testing.T) string {
	b := corpus.StaticBinaryB64()
	if b == "" {
		t.Fatal("cannot build the static Go binary the corpus needs (no Go toolchain?)")
	}
	return b
}

// TestStreamsOutput: the first line reaches the sink while the job still
// runs, from a cold sandbox (runsc's pipes) and a pooled one (the agent's
// frames).
func TestStreamsOutput(t *testing.T) {
	t.Run("Cold", func(t *testing.T) {
		tier := newTier(t, NewConfig())
		job, open := tiertest.ShellGate(t)
		tiertest.CheckGated(t, tiertest.Gated(t, tier, job, "first\n", open))
		// runsc's report of a missing program is replaced in the Result,
		// and so never reaches the sink either.
		var rec tiertest.Recorder
		res, err := tier.Run(rec.Context(context.Background()), cmdJob("no-such-program-airlock"))
		if err != nil || res.ExitCode != 127 {
			t.Fatalf("missing program: %v %+v", err, res)
		}
		rec.Check(t, res)
	})
	t.Run("Pooled", func(t *testing.T) {
		tier := newTier(t, NewConfig().WithPool(1, 1))
		warm(t, tier)
		job := cmdJob("sh", "-c", "echo first; echo note >&2; i=0; while [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; echo second")
		job.Limits.WallMS = 60_000
		res := tiertest.CancelGated(t, tier, job, "first\n")
		if res.Stdout != "first\n" {
			t.Fatalf("stdout %q", res.Stdout)
		}
		if st := tier.Stats(); st.Hits == 0 {
			t.Fatalf("the job did not run in a pooled sandbox: %+v", st)
		}
	})
}
