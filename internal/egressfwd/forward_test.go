package egressfwd_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/corpus/runner/gatewaylab"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/internal/egressfwd"
	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
	"github.com/airlock-sandbox/airlock/internal/testing/tiertest"
)

// TestWireMatchesGateway keeps the forwarder's copy of the wire equal to
// the gateway's.
func TestWireMatchesGateway(t *testing.T) {
	if egressfwd.StreamHTTP != egress.StreamHTTP || egressfwd.StreamDNS != egress.StreamDNS ||
		egressfwd.SandboxProxyAddr != egress.SandboxProxyAddr || egressfwd.SandboxDNSAddr != egress.SandboxDNSAddr {
		t.Fatal("the forwarder's stream kinds or sandbox addresses differ from package egress's")
	}
}

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}

// newTestEnv is the corpus's environment (gatewaylab), stopped when the
// test ends; extra adjusts the gateway's config before it starts.
func newTestEnv(t testing.TB, extra func(*egress.Config)) *gatewaylab.Env {
	t.Helper()
	env, err := gatewaylab.Start(extra)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Close)
	return env
}

// socketEnv is a test environment whose gateway also listens on a Unix
// socket.
func socketEnv(t *testing.T) (*gatewaylab.Env, string) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "egress.sock")
	env := newTestEnv(t, func(c *egress.Config) { c.Socket = sock })
	if env.GW.SocketPath() != sock {
		t.Fatalf("SocketPath() = %q", env.GW.SocketPath())
	}
	return env, sock
}

// TestForwarderLoopback carries HTTP, HTTPS and DNS over the gateway's
// Unix socket through a forwarder on loopback (no namespace needed).
func TestForwarderLoopback(t *testing.T) {
	env, sock := socketEnv(t)
	f, err := egressfwd.StartForwarder(context.Background(), sock, egressfwd.ForwarderConfig{HTTP: "127.0.0.1:0", DNS: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	proxy := mustURL("http://" + f.HTTPAddr().String())
	client := &http.Client{Transport: &http.Transport{
		Proxy: http.ProxyURL(proxy), TLSClientConfig: &tls.Config{RootCAs: env.Roots}, DisableKeepAlives: true,
	}}
	for _, c := range []struct {
		method, url string
		status      int
	}{
		{"GET", "http://origin.test:" + env.HTTPPort + "/ok", 200},
		{"PUT", "http://origin.test:" + env.HTTPPort + "/ok", 403},
		{"GET", "https://origin.test:" + env.HTTPSPort + "/ok", 200},
		{"POST", "https://origin.test:" + env.HTTPSPort + "/ok", 403},
		{"GET", "http://evil.test:" + env.HTTPPort + "/ok", 403},
	} {
		var body io.Reader
		if c.method != "GET" { // a GET with a body is refused
			body = strings.NewReader("x")
		}
		req, _ := http.NewRequest(c.method, c.url, body)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", c.method, c.url, err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("%s %s: status %d, want %d", c.method, c.url, resp.StatusCode, c.status)
		}
	}
	for _, net := range []string{"udp", "tcp"} {
		cl := &dns.Client{Net: net, Timeout: 5 * time.Second}
		ok := new(dns.Msg).SetQuestion("origin.test.", dns.TypeA)
		r, _, err := cl.Exchange(ok, f.DNSAddr().String())
		if err != nil || r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
			t.Errorf("%s: origin.test: %v %v", net, r, err)
		}
		bad := new(dns.Msg).SetQuestion("evil.test.", dns.TypeA)
		r, _, err = cl.Exchange(bad, f.DNSAddr().String())
		if err != nil || r.Rcode != dns.RcodeRefused {
			t.Errorf("%s: evil.test: %v %v", net, r, err)
		}
	}
	logs := env.TakeLogs()
	if !logged(logs, "dns", "evil.test", egress.Deny) || !logged(logs, "http", "origin.test", egress.Deny) || !logged(logs, "https", "origin.test", egress.Deny) {
		t.Errorf("refusals not logged: %+v", logs)
	}
}

func logged(logs []egress.Record, via, host string, v egress.Verdict) bool {
	for _, l := range logs {
		if l.Via == via && l.Host == host && l.Verdict == v {
			return true
		}
	}
	return false
}

// TestForwardStdio carries one proxy connection on a reader and a writer,
// as QEMU's guestfwd cmd: does, and rejects an unknown stream kind.
func TestForwardStdio(t *testing.T) {
	env, sock := socketEnv(t)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- egressfwd.ForwardStdio(sock, egressfwd.StreamHTTP, inR, outW) }()
	fmt.Fprintf(inW, "GET http://origin.test:%s/ok HTTP/1.1\r\nHost: origin.test:%s\r\nConnection: close\r\n\r\n", env.HTTPPort, env.HTTPPort)
	resp, err := http.ReadResponse(bufio.NewReader(outR), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(body) != "origin ok" {
		t.Errorf("stdio: %s %q", resp.Status, body)
	}
	inW.Close()
	if err := <-done; err != nil {
		t.Errorf("ForwardStdio: %v", err)
	}

	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("X"))
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Errorf("unknown stream kind was answered: %d %v", n, err)
	}
}

// TestForwardStdioEndsWithTheGateway: once the gateway has ended a
// stream, the stdio forwarder ends too, even while the client keeps its
// side open and silent: a guest must not keep a host process (QEMU starts
// one per guest connection) alive by holding connections the gateway has
// closed, refused or timed out.
func TestForwardStdioEndsWithTheGateway(t *testing.T) {
	env, sock := socketEnv(t)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	t.Cleanup(func() { inW.Close(); outR.Close() })
	done := make(chan error, 1)
	go func() { done <- egressfwd.ForwardStdio(sock, egressfwd.StreamHTTP, inR, outW) }()
	fmt.Fprintf(inW, "GET http://evil.test:%s/ok HTTP/1.1\r\nHost: evil.test:%s\r\n\r\n", env.HTTPPort, env.HTTPPort)
	resp, err := http.ReadResponse(bufio.NewReader(outR), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("evil.test: %s", resp.Status)
	}
	go io.Copy(io.Discard, outR)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the forwarder still runs 10 s after the gateway ended the stream")
	}
}

// TestForwarderNetns runs curl inside a network namespace that has only
// loopback: through the forwarder a granted GET reaches the loopback
// origin and PUT is refused; with --noproxy nothing is reachable; DNS
// answers granted names only. The gateway (and its log) stays outside.
func TestForwarderNetns(t *testing.T) {
	if testenv.Inside(t) {
		netnsChild(t) // this process is the half inside the namespace
		return
	}
	curl, err := exec.LookPath("curl")
	if err != nil {
		tiertest.Unavailable(t, "egress-netns", fmt.Errorf("curl not installed (scripts/setup-egress.sh installs it): %w", err))
	}
	env, sock := socketEnv(t)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, env.GW.CACertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	testenv.InNamespaces(t, syscall.CLONE_NEWNET, time.Minute,
		"CHILD_SOCKET="+sock, "CHILD_CA="+caFile, "CHILD_CURL="+curl,
		"CHILD_HTTP="+env.HTTPPort, "CHILD_HTTPS="+env.HTTPSPort)
	logs := env.TakeLogs()
	if !logged(logs, "http", "origin.test", egress.Allow) || !logged(logs, "http", "origin.test", egress.Deny) || !logged(logs, "dns", "evil.test", egress.Deny) {
		t.Errorf("decisions from inside the namespace not logged: %+v", logs)
	}
}

// netnsChild is the half of TestForwarderNetns that runs inside the
// namespace: the test binary re-executed by testenv.InNamespaces.
func netnsChild(t *testing.T) {
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range ifs {
		if i.Name != "lo" {
			t.Fatalf("namespace has interface %s; want only lo", i.Name)
		}
	}
	f, err := egressfwd.StartForwarder(context.Background(), os.Getenv("CHILD_SOCKET"), egressfwd.ForwarderConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	curl, httpPort, httpsPort := os.Getenv("CHILD_CURL"), os.Getenv("CHILD_HTTP"), os.Getenv("CHILD_HTTPS")
	run := func(args ...string) (string, error) {
		cmd := exec.Command(curl, append([]string{"-sS", "--max-time", "10", "-o", "/dev/null", "-w", "%{http_code}"}, args...)...)
		cmd.Env = append(egress.SandboxEnv(os.Getenv("CHILD_CA")), "PATH=/usr/bin:/bin")
		out, err := cmd.CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	origin := "http://origin.test:" + httpPort + "/ok"
	if code, err := run(origin); err != nil || code != "200" {
		t.Errorf("curl GET via proxy: %q %v", code, err)
	}
	if code, _ := run("-X", "PUT", "-d", "secret", origin); code != "403" {
		t.Errorf("curl PUT via proxy: %q, want 403", code)
	}
	if code, err := run("https://origin.test:" + httpsPort + "/ok"); err != nil || code != "200" {
		t.Errorf("curl https GET via proxy: %q %v", code, err)
	}
	if code, _ := run("-X", "DELETE", "https://origin.test:"+httpsPort+"/ok"); code != "403" {
		t.Errorf("curl https DELETE via proxy: %q, want 403", code)
	}
	for _, u := range []string{origin, "http://127.0.0.1:" + httpPort + "/ok", "http://93.184.215.14/", "http://[2606:4700::1]/"} {
		if code, err := run("--noproxy", "*", u); err == nil {
			t.Errorf("curl --noproxy %s succeeded: %q", u, code)
		}
	}
	cl := &dns.Client{Net: "udp", Timeout: 5 * time.Second}
	r, _, err := cl.Exchange(new(dns.Msg).SetQuestion("origin.test.", dns.TypeA), "127.0.0.1:53")
	if err != nil || len(r.Answer) != 1 {
		t.Errorf("DNS origin.test: %v %v", r, err)
	}
	r, _, err = cl.Exchange(new(dns.Msg).SetQuestion("evil.test.", dns.TypeA), "127.0.0.1:53")
	if err != nil || r.Rcode != dns.RcodeRefused {
		t.Errorf("DNS evil.test: %v %v", r, err)
	}
	// nslookup, as a sandboxed job would run it (the tier sets
	// /etc/resolv.conf to 127.0.0.1; here the server is named).
	if nslookup, err := exec.LookPath("nslookup"); err == nil {
		if out, err := exec.Command(nslookup, "origin.test", "127.0.0.1").CombinedOutput(); err != nil || !strings.Contains(string(out), "127.0.0.1") {
			t.Errorf("nslookup origin.test: %v\n%s", err, out)
		}
		if out, err := exec.Command(nslookup, "evil.test", "127.0.0.1").CombinedOutput(); err == nil || !strings.Contains(string(out), "REFUSED") {
			t.Errorf("nslookup evil.test: %v\n%s", err, out)
		}
	} else if testenv.Strict() {
		t.Errorf("nslookup not installed (scripts/setup-egress.sh installs it)")
	}
	// A raw socket sees only this namespace's loopback: nothing of the host.
	if fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_RAW, syscall.IPPROTO_ICMP); err == nil {
		defer syscall.Close(fd)
		sa := &syscall.SockaddrInet4{Addr: [4]byte{93, 184, 215, 14}}
		if err := syscall.Sendto(fd, []byte{8, 0, 0xf7, 0xff, 0, 0, 0, 0}, 0, sa); err == nil {
			t.Errorf("raw ICMP to a public address was sent")
		}
	}
}

// TestForwarderBindsAtClaim shows how a warm pool binds a job's policy at
// claim time: the forwarder (started with the pooled sandbox, before any
// job) holds no policy; whichever gateway listens on the socket path when
// a connection is made decides. Job A's rules apply while A's gateway
// serves the path, then job B's.
func TestForwarderBindsAtClaim(t *testing.T) {
	origin := newTestEnv(t, nil) // only for its origins
	sock := filepath.Join(t.TempDir(), "pool.sock")
	f, err := egressfwd.StartForwarder(context.Background(), sock, egressfwd.ForwarderConfig{HTTP: "127.0.0.1:0", DNS: "-"})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(mustURL("http://" + f.HTTPAddr().String())), DisableKeepAlives: true}}
	get := func(host string) int {
		resp, err := client.Get("http://" + host + ":" + origin.HTTPPort + "/ok")
		if err != nil {
			return 0 // no gateway on the socket: nothing reachable
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := get("a.test"); code == 200 {
		t.Fatal("reached the origin before any job claimed the sandbox")
	}
	pins := egress.Hosts{}
	_ = pins.Add("a.test", netip.MustParseAddr("127.0.0.1"))
	_ = pins.Add("b.test", netip.MustParseAddr("127.0.0.1"))
	port := gatewaylab.Atoi(origin.HTTPPort)
	for _, job := range []struct{ name, allowed, refused string }{{"job-a", "a.test", "b.test"}, {"job-b", "b.test", "a.test"}} {
		gw, err := egress.Start(context.Background(), egress.Config{Job: job.name, Socket: sock, Hosts: pins,
			Rules: []airlock.NetRule{{Host: job.allowed, Ports: []int{port}}}})
		if err != nil {
			t.Fatal(err)
		}
		if code := get(job.allowed); code != 200 {
			t.Errorf("%s: %s: %d, want 200", job.name, job.allowed, code)
		}
		if code := get(job.refused); code != 403 {
			t.Errorf("%s: %s: %d, want 403", job.name, job.refused, code)
		}
		gw.Close()
	}
}
