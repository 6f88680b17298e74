// Package egresstest holds what the tiers' egress tests share: a loopback
// origin pinned under test names, a decision recorder, a check for the
// programs the tests run inside sandboxes, and the probe script with its
// expected results.
package egresstest

import (
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
)

// Origin is a loopback HTTP origin that answers every method (and
// redirects /redirect?to=URL with a 302), and the pins that name it.
type Origin struct {
	Port string
	Pins egress.Hosts
	mu   sync.Mutex
	hits map[string]int // by method
}

// StartOrigin starts an origin on 127.0.0.1, closed when the test ends,
// and pins names to it.
func StartOrigin(t testing.TB, names ...string) *Origin {
	t.Helper()
	o := &Origin{Pins: egress.Hosts{}, hits: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.mu.Lock()
		o.hits[r.Method]++
		o.mu.Unlock()
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
			return
		}
		fmt.Fprintln(w, "origin says hello")
	}))
	t.Cleanup(srv.Close)
	_, o.Port, _ = net.SplitHostPort(srv.Listener.Addr().String())
	for _, n := range names {
		if err := o.Pins.Add(n, netip.MustParseAddr("127.0.0.1")); err != nil {
			t.Fatal(err)
		}
	}
	return o
}

// Hits returns how many requests with method reached the origin.
func (o *Origin) Hits(method string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.hits[method]
}

// Rule allows GET and HEAD to host on the origin's port.
func (o *Origin) Rule(host string) airlock.NetRule {
	p, _ := strconv.Atoi(o.Port)
	return airlock.NetRule{Host: host, Ports: []int{p}}
}

// NeedTools skips (fails under CI) when a program the test runs inside a
// sandbox is missing; scripts/setup-egress.sh installs them.
func NeedTools(t testing.TB, progs ...string) {
	t.Helper()
	for _, p := range progs {
		if _, err := exec.LookPath(p); err != nil {
			testenv.Skipf(t, "%s is missing (scripts/setup-egress.sh installs it)", p)
		}
	}
}

// Recorder collects egress decisions; Add is a Config log function.
type Recorder struct {
	mu  sync.Mutex
	log []egress.Record
}

// Add records one decision.
func (r *Recorder) Add(rec egress.Record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log = append(r.log, rec)
}

// Len returns how many decisions were recorded.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.log)
}

// Has reports whether a decision with this via, host and verdict was
// recorded.
func (r *Recorder) Has(via, host string, v egress.Verdict) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rec := range r.log {
		if rec.Via == via && rec.Host == host && rec.Verdict == v {
			return true
		}
	}
	return false
}

// GrantedScript probes egress from inside a sandbox whose job is granted
// GET on origin.test (see [CheckGranted]).
func (o *Origin) GrantedScript() string {
	url := "http://origin.test:" + o.Port + "/ok"
	return strings.Join([]string{
		"curl -sS -m 10 -o /dev/null -w 'get=%{http_code}\\n' " + url,
		"curl -sS -m 10 -o /dev/null -w 'put=%{http_code}\\n' -X PUT --data x " + url,
		"curl -sS -m 10 -o /dev/null -w 'other=%{http_code}\\n' http://other.test:" + o.Port + "/",
		"getent hosts evil.test; echo getent=$?",
		"nslookup -timeout=3 -retry=0 evil.test >/dev/null 2>&1; echo nslookup=$?",
		"curl --noproxy '*' -sS -m 3 -o /dev/null http://127.0.0.1:" + o.Port + "/ 2>/dev/null; echo direct-ip=$?",
		"curl --noproxy '*' -sS -m 3 -o /dev/null " + url + " 2>/dev/null; echo direct-name=$?",
		"curl --noproxy '*' -sS -m 3 -o /dev/null http://1.1.1.1/ 2>/dev/null; echo direct-public=$?",
		"grep -c 'BEGIN CERTIFICATE' \"$SSL_CERT_FILE\"",
		"echo proxy=$http_proxy",
	}, "\n")
}

// CheckGranted checks a GrantedScript run: GET through the proxy reaches
// the origin (200), PUT and another name are refused by the proxy (403), a
// disallowed name does not resolve, nothing is reached without the proxy,
// the CA and proxy variables are in place, and the decisions are in the
// recorder and the result.
func (o *Origin) CheckGranted(t testing.TB, res airlock.Result, rec *Recorder) {
	t.Helper()
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
	if o.Hits("GET") != 1 || o.Hits("PUT") != 0 {
		t.Errorf("origin saw GET %d (want 1), PUT %d (want 0)", o.Hits("GET"), o.Hits("PUT"))
	}
	for _, c := range []struct {
		via, host string
		v         egress.Verdict
	}{{"http", "origin.test", egress.Allow}, {"http", "origin.test", egress.Deny}, {"http", "other.test", egress.Deny}, {"dns", "evil.test", egress.Deny}} {
		if !rec.Has(c.via, c.host, c.v) {
			t.Errorf("no %s %s %s record in the log", c.v, c.via, c.host)
		}
	}
	joined := strings.Join(res.Decision, "\n")
	if !strings.Contains(joined, "egress allow http GET origin.test") || !strings.Contains(joined, "egress deny dns") {
		t.Errorf("result's decisions lack the egress log:\n%s", joined)
	}
}

// UngrantedScript probes egress from a job without a net grant (see
// [CheckUngranted]); dir is where the tier binds the gateway's directory.
func (o *Origin) UngrantedScript(dir string) string {
	return strings.Join([]string{
		"curl -sS -m 3 -o /dev/null -x http://" + egress.SandboxProxyAddr + " http://origin.test:" + o.Port + "/ 2>/dev/null; echo via-proxy=$?",
		"curl -sS -m 3 -o /dev/null http://127.0.0.1:" + o.Port + "/ 2>/dev/null; echo direct=$?",
		"echo sock=$(ls -A " + dir + " 2>/dev/null | grep -c egress)",
		"env | grep -ci proxy",
	}, "\n")
}

// CheckUngranted: nothing reached, no socket, no variables.
func (o *Origin) CheckUngranted(t testing.TB, res airlock.Result) {
	t.Helper()
	for _, want := range []string{"via-proxy=7\n", "direct=7\n", "sock=0\n", "\n0\n"} {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, res.Stdout)
		}
	}
	if o.Hits("GET") != 0 {
		t.Errorf("a job without a grant reached the origin")
	}
}

// PoolScript asks for allowed and refused on the origin's port.
func (o *Origin) PoolScript(allowed, refused string) string {
	return fmt.Sprintf("curl -sS -m 10 -o /dev/null -w 'allowed=%%{http_code}\\n' http://%s:%s/\n"+
		"curl -sS -m 10 -o /dev/null -w 'refused=%%{http_code}\\n' http://%s:%s/\n", allowed, o.Port, refused, o.Port)
}

// CheckPool: the claiming job's rule decided.
func CheckPool(t testing.TB, res airlock.Result, allowed string) {
	t.Helper()
	if !strings.Contains(res.Stdout, "allowed=200\n") || !strings.Contains(res.Stdout, "refused=403\n") {
		t.Errorf("job allowing %s: %s%s", allowed, res.Stdout, res.Stderr)
	}
}

// ShellJob is a command job running script with sh, granted rules and
// spawn (the probes run curl, getent and nslookup), with a generous wall
// clock (the probes wait for timeouts of a few seconds).
func ShellJob(script string, rules ...airlock.NetRule) airlock.Job {
	return airlock.Job{Kind: airlock.KindCommand, Argv: []string{"sh", "-c", script},
		Grants: airlock.Grants{Net: rules, Spawn: true}, Limits: airlock.Limits{WallMS: 60000}}
}

// TLSOrigin is a loopback HTTPS origin, pinned as example.com (the name
// its test certificate carries), and the roots that verify it.
type TLSOrigin struct {
	Port  string
	Pins  egress.Hosts
	Roots *x509.CertPool
}

// StartTLSOrigin starts an HTTPS origin on 127.0.0.1, closed when the
// test ends.
func StartTLSOrigin(t testing.TB) *TLSOrigin {
	t.Helper()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "secure hello")
	}))
	t.Cleanup(srv.Close)
	o := &TLSOrigin{Pins: egress.Hosts{}, Roots: x509.NewCertPool()}
	_, o.Port, _ = net.SplitHostPort(srv.Listener.Addr().String())
	o.Roots.AddCert(srv.Certificate())
	if err := o.Pins.Add("example.com", netip.MustParseAddr("127.0.0.1")); err != nil {
		t.Fatal(err)
	}
	return o
}

// Rule allows GET and HEAD to example.com on the origin's port.
func (o *TLSOrigin) Rule() airlock.NetRule {
	p, _ := strconv.Atoi(o.Port)
	return airlock.NetRule{Host: "example.com", Ports: []int{p}}
}

// Script fetches the origin over HTTPS through the proxy, trusting only
// the CA the tier placed (SSL_CERT_FILE and friends), with GET and DELETE.
func (o *TLSOrigin) Script() string {
	url := "https://example.com:" + o.Port + "/"
	return "curl -sS -m 10 -w ' get=%{http_code}\\n' " + url + "\n" +
		"curl -sS -m 10 -o /dev/null -w 'delete=%{http_code}\\n' -X DELETE " + url + "\n"
}

// Check: GET went through (body and 200), DELETE was refused inside the
// tunnel (403).
func (o *TLSOrigin) Check(t testing.TB, res airlock.Result) {
	t.Helper()
	for _, want := range []string{"secure hello\n get=200\n", "delete=403\n"} {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("stdout lacks %q:\n%s\nstderr:\n%s", want, res.Stdout, res.Stderr)
		}
	}
}
