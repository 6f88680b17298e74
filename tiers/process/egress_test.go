package process

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/internal/testing/egresstest"
)

// egressConfig is testConfig with the origin's pins and a uid range of its
// own, so the leftover check sees only this test's sandboxes.
func egressConfig(t *testing.T, o *egresstest.Origin, log func(egress.Record)) Config {
	return testConfig(t).WithUIDRange(1<<30+1<<20, 1<<12).WithEgress(egress.Config{Hosts: o.Pins, Log: log})
}

// TestEgress: from inside the process tier, curl through the granted
// policy reaches an allowed loopback origin with GET and is refused with
// PUT; a disallowed name does not resolve and the refusal is logged; curl
// bypassing the proxy has no route; the CA and proxy variables are placed.
//
// The stage here is this test binary re-executed (its forwarder is the
// stage's own binary); TestStageBinaryEgress runs the same checks with the
// separate stage binary, which the other egress tests find as the tier
// does.
func TestEgress(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	checkEgress(t, func(c Config) Config { return c.WithStageBinary(self) })
}

// checkEgress runs TestEgress's checks on a container tier configured by
// adjust.
func checkEgress(t *testing.T, adjust func(Config) Config) {
	t.Helper()
	egresstest.NeedTools(t, "curl", "nslookup", "getent")
	o := egresstest.StartOrigin(t, "origin.test")
	rec := &egresstest.Recorder{}
	cfg := adjust(egressConfig(t, o, rec.Add))
	tier := newTestTier(t, bothTiers[0], cfg)
	res, err := tier.Run(context.Background(), egresstest.ShellJob(o.GrantedScript(), o.Rule("origin.test")))
	if err != nil {
		t.Fatalf("%v\n%s\n%s", err, res.Stdout, res.Stderr)
	}
	o.CheckGranted(t, res, rec)
	assertClean(t, tier, cfg)
}

// TestEgressNoGrant: a job without a net grant gets no socket, no
// forwarder and no variables, and reaches nothing — cold and pooled.
func TestEgressNoGrant(t *testing.T) {
	egresstest.NeedTools(t, "curl")
	o := egresstest.StartOrigin(t, "origin.test")
	rec := &egresstest.Recorder{}
	for _, pooled := range []bool{false, true} {
		t.Run(fmt.Sprint("pooled=", pooled), func(t *testing.T) {
			cfg := egressConfig(t, o, rec.Add)
			if pooled {
				cfg = cfg.WithPool(1)
			}
			tier := newTestTier(t, bothTiers[0], cfg)
			if pooled {
				waitPoolFilled(t, tier, 1)
			}
			res, err := tier.Run(context.Background(), cmdJob("sh", "-c", o.UngrantedScript(sandboxEgressDir)))
			if err != nil {
				t.Fatal(err)
			}
			o.CheckUngranted(t, res)
			assertClean(t, tier, cfg)
		})
	}
	if rec.Len() != 0 {
		t.Errorf("a job without a grant got a gateway (%d decisions)", rec.Len())
	}
}

func waitPoolFilled(t *testing.T, tier *Tier, n int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for tier.PoolStats().Ready < n {
		if time.Now().After(deadline) {
			t.Fatal("pool did not fill")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestEgressPoolBindsAtClaim: a pooled sandbox, created before any job,
// enforces the rules of the job that claims it.
func TestEgressPoolBindsAtClaim(t *testing.T) {
	egresstest.NeedTools(t, "curl")
	o := egresstest.StartOrigin(t, "a.test", "b.test")
	cfg := egressConfig(t, o, nil).WithPool(1)
	tier := newTestTier(t, bothTiers[0], cfg)
	for _, j := range []struct{ allowed, refused string }{{"a.test", "b.test"}, {"b.test", "a.test"}} {
		waitPoolFilled(t, tier, 1)
		before := tier.PoolStats().Hits
		res, err := tier.Run(context.Background(), egresstest.ShellJob(o.PoolScript(j.allowed, j.refused), o.Rule(j.allowed)))
		if err != nil {
			t.Fatal(err)
		}
		if tier.PoolStats().Hits != before+1 {
			t.Fatal("the job did not run in a pooled sandbox")
		}
		egresstest.CheckPool(t, res, j.allowed)
	}
	assertClean(t, tier, cfg)
}

// TestEnvPassed: both process tiers hand a job's plain environment to
// the command, beside the defaults it does not name.
func TestEnvPassed(t *testing.T) {
	for _, tc := range bothTiers {
		t.Run(tc.name, func(t *testing.T) {
			tier := newTestTier(t, tc, testConfig(t))
			job := cmdJob("sh", "-c", `printf '%s|%s' "$MODE" "${PATH:+set}"`)
			job.Env = map[string]string{"MODE": "x y"}
			res, err := tier.Run(context.Background(), job)
			if err != nil {
				t.Fatal(err)
			}
			if res.Stdout != "x y|set" {
				t.Fatalf("stdout %q, want %q (stderr %q)", res.Stdout, "x y|set", res.Stderr)
			}
		})
	}
}

// TestEgressFilterRefuses: the level-2 tier shares the host's network
// namespace, so it refuses net grants with the reason.
func TestEgressFilterRefuses(t *testing.T) {
	tier, err := NewFilter(testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	job := egresstest.ShellJob("true", airlock.NetRule{Host: "example.com"})
	var na *airlock.NotAdmitted
	if err := tier.Admit(job); !asErr(err, &na) || !strings.Contains(na.Reason, "network namespace") {
		t.Fatalf("want NotAdmitted naming the shared network namespace, got %v", err)
	}
}

// TestEgressHTTPS: HTTPS through the proxy with the CA the tier placed:
// the gateway terminates TLS, checks the method inside the tunnel (GET
// 200, DELETE 403) and verifies the origin with the operator's roots.
func TestEgressHTTPS(t *testing.T) {
	egresstest.NeedTools(t, "curl")
	o := egresstest.StartTLSOrigin(t)
	cfg := testConfig(t).WithUIDRange(1<<30+1<<20, 1<<12).WithEgress(egress.Config{Hosts: o.Pins, OriginRoots: o.Roots})
	tier := newTestTier(t, bothTiers[0], cfg)
	res, err := tier.Run(context.Background(), egresstest.ShellJob(o.Script(), o.Rule()))
	if err != nil {
		t.Fatal(err)
	}
	o.Check(t, res)
}

// TestEgressSocketOtherJobs: a job's gateway socket, in the sandbox's
// egress directory under the tier's base directory, is reachable only
// from that sandbox. A level-2 program runs on the host's file system
// and may connect to any Unix socket its uid may write (Landlock does
// not govern connect by path): a net-granted container's gateway,
// reached from there, would carry the level-2 job's requests under the
// other job's grants — network access without a grant of its own. The
// path is given here; a program would find it from its own scratch
// directory's name, which shares the owner and counts the sandboxes.
func TestEgressSocketOtherJobs(t *testing.T) {
	egresstest.NeedTools(t, "python3")
	o := egresstest.StartOrigin(t, "origin.test")
	rec := &egresstest.Recorder{}
	cfg := egressConfig(t, o, rec.Add)
	container := newTestTier(t, bothTiers[0], cfg)
	filter := newTestTier(t, bothTiers[1], cfg)

	// The net-granted job runs until the tier closes, after the probe.
	done := make(chan struct{})
	go func() {
		defer close(done)
		job := egresstest.ShellJob("sleep 30", o.Rule("origin.test"))
		job.Limits.WallMS = 60_000
		_, _ = container.Run(context.Background(), job)
	}()
	var sock string
	for deadline := time.Now().Add(30 * time.Second); sock == ""; {
		if time.Now().After(deadline) {
			t.Fatal("the net-granted job's gateway socket did not appear")
		}
		socks, _ := filepath.Glob(filepath.Join(cfg.baseDir, "*.egress", "egress.sock"))
		if len(socks) > 0 {
			sock = socks[0]
		}
		time.Sleep(20 * time.Millisecond)
	}
	probe := `import socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1])
except OSError as e:
    print('refused', e.errno); sys.exit(0)
s.sendall(b'HGET http://origin.test:` + o.Port + `/ok HTTP/1.0\r\nHost: origin.test\r\n\r\n')
print('CONNECTED', s.recv(4096))
`
	res, err := filter.Run(context.Background(), cmdJob("python3", "-c", probe, sock))
	if err != nil {
		t.Fatalf("%v\n%s", err, res.Stderr)
	}
	if strings.Contains(res.Stdout, "CONNECTED") || o.Hits("GET") > 0 {
		t.Errorf("a level-2 job reached another job's egress gateway: %q (origin GETs %d)", res.Stdout, o.Hits("GET"))
	}
	if !strings.Contains(res.Stdout, "refused") {
		t.Errorf("probe said %q, %q", res.Stdout, res.Stderr)
	}
	// Both tiers share the base directory: both closed before either is
	// checked for leftovers.
	filter.Close()
	container.Close() // ends the waiting job
	<-done
	assertClean(t, container, cfg)
	assertClean(t, filter, cfg)
}
