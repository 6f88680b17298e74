package process

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/egress"
)

// egressOrigin is a loopback HTTP origin and the pins that name it.
type egressOrigin struct {
	port  string
	hits  *hitCounter
	pins  egress.Hosts
	names []string
}

type hitCounter struct {
	mu sync.Mutex
	n  map[string]int // by method
}

func (h *hitCounter) get(method string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[method]
}

// startEgressOrigin starts a loopback origin that answers every method and
// pins names to it.
func startEgressOrigin(t *testing.T, names ...string) *egressOrigin {
	t.Helper()
	hits := &hitCounter{n: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.mu.Lock()
		hits.n[r.Method]++
		hits.mu.Unlock()
		fmt.Fprintln(w, "origin says hello")
	}))
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	pins := egress.Hosts{}
	for _, n := range names {
		if err := pins.Add(n, netip.MustParseAddr("127.0.0.1")); err != nil {
			t.Fatal(err)
		}
	}
	return &egressOrigin{port: port, hits: hits, pins: pins, names: names}
}

// needTools skips (fails under CI) when a program the test runs inside the
// sandbox is missing; scripts/setup-egress.sh installs them.
func needTools(t *testing.T, progs ...string) {
	t.Helper()
	for _, p := range progs {
		if _, err := exec.LookPath(p); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is missing (scripts/setup-egress.sh installs it)", p)
			}
			t.Skipf("%s is missing (scripts/setup-egress.sh installs it)", p)
		}
	}
}

// egressConfig is testConfig with a uid range of its own, so the
// leftover check sees only this test's sandboxes.
func egressConfig(t *testing.T, o *egressOrigin) Config {
	return testConfig(t).WithUIDRange(1<<30+1<<20, 1<<12).WithEgressHosts(o.pins)
}

// recorder collects a tier's egress decisions.
type recorder struct {
	mu  sync.Mutex
	log []egress.Record
}

func (r *recorder) add(rec egress.Record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log = append(r.log, rec)
}

func (r *recorder) has(via, host string, v egress.Verdict) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rec := range r.log {
		if rec.Via == via && rec.Host == host && rec.Verdict == v {
			return true
		}
	}
	return false
}

func netJob(script string, rules ...airlock.NetRule) airlock.Job {
	job := cmdJob("sh", "-c", script)
	job.Grants.Net = rules
	job.Limits.WallMS = 30000
	return job
}

// TestEgress: from inside the process tier, curl through the granted
// policy reaches an allowed loopback origin with GET and is refused with
// PUT; a disallowed name does not resolve and the refusal is logged; curl
// bypassing the proxy has no route; the CA and proxy variables are placed.
func TestEgress(t *testing.T) {
	needTools(t, "curl", "nslookup", "getent")
	o := startEgressOrigin(t, "origin.test")
	rec := &recorder{}
	cfg := egressConfig(t, o).WithEgressLog(rec.add)
	tier := newTestTier(t, bothTiers[0], cfg)
	url := "http://origin.test:" + o.port + "/ok"
	script := strings.Join([]string{
		"curl -sS -m 10 -o /dev/null -w 'get=%{http_code}\\n' " + url,
		"curl -sS -m 10 -o /dev/null -w 'put=%{http_code}\\n' -X PUT --data x " + url,
		"curl -sS -m 10 -o /dev/null -w 'other=%{http_code}\\n' http://other.test:" + o.port + "/",
		"getent hosts evil.test; echo getent=$?",
		"nslookup -timeout=3 -retry=0 evil.test >/dev/null 2>&1; echo nslookup=$?",
		"curl --noproxy '*' -sS -m 3 -o /dev/null http://127.0.0.1:" + o.port + "/ 2>/dev/null; echo direct-ip=$?",
		"curl --noproxy '*' -sS -m 3 -o /dev/null " + url + " 2>/dev/null; echo direct-name=$?",
		"curl --noproxy '*' -sS -m 3 -o /dev/null http://1.1.1.1/ 2>/dev/null; echo direct-public=$?",
		"grep -c 'BEGIN CERTIFICATE' \"$SSL_CERT_FILE\"",
		"echo proxy=$http_proxy",
	}, "\n")
	res, err := tier.Run(context.Background(), netJob(script, airlock.NetRule{Host: "origin.test", Ports: []int{atoiT(t, o.port)}}))
	if err != nil {
		t.Fatalf("%v\n%s\n%s", err, res.Stdout, res.Stderr)
	}
	for _, want := range []string{"get=200\n", "put=403\n", "other=403\n", "getent=2\n", "nslookup=1\n",
		"direct-ip=7\n", "direct-public=7\n", "\n1\n", "proxy=http://" + egress.SandboxProxyAddr + "\n"} {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("stdout lacks %q:\n%s\nstderr:\n%s", want, res.Stdout, res.Stderr)
		}
	}
	// The pinned name may resolve (to the sandbox's own loopback), but
	// nothing is reached without the proxy.
	if strings.Contains(res.Stdout, "direct-name=0\n") {
		t.Errorf("curl --noproxy reached the origin by name:\n%s", res.Stdout)
	}
	if o.hits.get("GET") != 1 || o.hits.get("PUT") != 0 {
		t.Errorf("origin saw GET %d (want 1), PUT %d (want 0)", o.hits.get("GET"), o.hits.get("PUT"))
	}
	for _, c := range []struct {
		via, host string
		v         egress.Verdict
	}{{"http", "origin.test", egress.Allow}, {"http", "origin.test", egress.Deny}, {"http", "other.test", egress.Deny}, {"dns", "evil.test", egress.Deny}} {
		if !rec.has(c.via, c.host, c.v) {
			t.Errorf("no %s %s %s record in the log: %+v", c.v, c.via, c.host, rec.log)
		}
	}
	joined := strings.Join(res.Decision, "\n")
	if !strings.Contains(joined, "egress allow http GET origin.test") || !strings.Contains(joined, "egress deny dns") {
		t.Errorf("result's decisions lack the egress log:\n%s", joined)
	}
	assertClean(t, cfg)
}

func atoiT(t *testing.T, s string) int {
	t.Helper()
	var n int
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestEgressNoGrant: a job without a net grant gets no socket, no
// forwarder and no variables, and reaches nothing — cold and pooled.
func TestEgressNoGrant(t *testing.T) {
	needTools(t, "curl")
	o := startEgressOrigin(t, "origin.test")
	rec := &recorder{}
	script := strings.Join([]string{
		"curl -sS -m 3 -o /dev/null -x http://" + egress.SandboxProxyAddr + " http://origin.test:" + o.port + "/ 2>/dev/null; echo via-proxy=$?",
		"curl -sS -m 3 -o /dev/null http://127.0.0.1:" + o.port + "/ 2>/dev/null; echo direct=$?",
		"echo sock=$(ls -A /run/egress 2>/dev/null | wc -l)",
		"env | grep -ci proxy",
	}, "\n")
	for _, pooled := range []bool{false, true} {
		t.Run(fmt.Sprint("pooled=", pooled), func(t *testing.T) {
			cfg := egressConfig(t, o).WithEgressLog(rec.add)
			if pooled {
				cfg = cfg.WithPool(1)
			}
			tier := newTestTier(t, bothTiers[0], cfg)
			if pooled {
				waitPoolFilled(t, tier, 1)
			}
			res, err := tier.Run(context.Background(), cmdJob("sh", "-c", script))
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"via-proxy=7\n", "direct=7\n", "sock=0\n", "\n0\n"} {
				if !strings.Contains(res.Stdout, want) {
					t.Errorf("stdout lacks %q:\n%s", want, res.Stdout)
				}
			}
			tier.Close()
			assertClean(t, cfg)
		})
	}
	if o.hits.get("GET") != 0 || len(rec.log) != 0 {
		t.Errorf("a job without a grant reached the origin (%d) or a gateway (%v)", o.hits.get("GET"), rec.log)
	}
}

func waitPoolFilled(t *testing.T, tier *Tier, n int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for tier.pool.len() < n {
		if time.Now().After(deadline) {
			t.Fatal("pool did not fill")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestEgressPoolBindsAtClaim: a pooled sandbox, created before any job,
// enforces the rules of the job that claims it.
func TestEgressPoolBindsAtClaim(t *testing.T) {
	needTools(t, "curl")
	o := startEgressOrigin(t, "a.test", "b.test")
	cfg := egressConfig(t, o).WithPool(1)
	tier := newTestTier(t, bothTiers[0], cfg)
	port := atoiT(t, o.port)
	for _, j := range []struct{ allowed, refused string }{{"a.test", "b.test"}, {"b.test", "a.test"}} {
		waitPoolFilled(t, tier, 1)
		before := tier.pool.claims.Load()
		script := fmt.Sprintf("curl -sS -m 10 -o /dev/null -w 'allowed=%%{http_code}\\n' http://%s:%s/\n"+
			"curl -sS -m 10 -o /dev/null -w 'refused=%%{http_code}\\n' http://%s:%s/\n", j.allowed, o.port, j.refused, o.port)
		res, err := tier.Run(context.Background(), netJob(script, airlock.NetRule{Host: j.allowed, Ports: []int{port}}))
		if err != nil {
			t.Fatal(err)
		}
		if tier.pool.claims.Load() != before+1 {
			t.Fatal("the job did not run in a pooled sandbox")
		}
		if !strings.Contains(res.Stdout, "allowed=200\n") || !strings.Contains(res.Stdout, "refused=403\n") {
			t.Errorf("job allowing %s: %s%s", j.allowed, res.Stdout, res.Stderr)
		}
	}
	tier.Close()
	assertClean(t, cfg)
}

// TestEgressFilterRefuses: the level-2 tier shares the host's network
// namespace, so it refuses net grants with the reason.
func TestEgressFilterRefuses(t *testing.T) {
	tier, err := NewFilter(testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	job := netJob("true", airlock.NetRule{Host: "example.com"})
	var na *airlock.NotAdmitted
	if err := tier.Admit(&job); !asErr(err, &na) || !strings.Contains(na.Reason, "network namespace") {
		t.Fatalf("want NotAdmitted naming the shared network namespace, got %v", err)
	}
}
