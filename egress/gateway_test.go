package egress_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/corpus/runner/gatewaylab"
	"github.com/airlock-sandbox/airlock/egress"
)

func TestStartRefusesBadConfig(t *testing.T) {
	_, err := egress.Start(context.Background(), egress.Config{Rules: []airlock.NetRule{{Host: "0x7f000001"}}})
	var inv *airlock.InvalidJob
	if !errors.As(err, &inv) {
		t.Errorf("IP-literal rule: %v, want *airlock.InvalidJob", err)
	}
	if _, err := egress.Start(context.Background(), egress.Config{Socket: "/nonexistent-dir/x.sock"}); err == nil {
		t.Error("socket in a missing directory: no error")
	}
	file := filepath.Join(t.TempDir(), "not-a-socket")
	if err := os.WriteFile(file, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := egress.Start(context.Background(), egress.Config{Socket: file}); err == nil {
		t.Error("socket path holding a regular file: no error")
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "keep" {
		t.Errorf("regular file at the socket path was touched: %q %v", b, err)
	}
	if _, err := egress.Start(context.Background(), egress.Config{Listen: "256.0.0.1:1"}); err == nil {
		t.Error("bad listen address: no error")
	}
}

func TestCloseRemovesSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "g.sock")
	ctx, cancel := context.WithCancel(context.Background())
	gw, err := egress.Start(ctx, egress.Config{Socket: sock})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(sock); err != nil || st.Mode().Perm() != 0o666 {
		t.Fatalf("socket: %v %v", st, err)
	}
	cancel() // ending the context closes the gateway
	for i := 0; i < 200; i++ {
		if _, err := os.Stat(sock); os.IsNotExist(err) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("socket left behind after the context ended: %v", err)
	}
	gw.Close() // idempotent
}

// TestBodyCaps checks the request and response caps, through the proxy and
// in-process.
func TestBodyCaps(t *testing.T) {
	env := newTestEnv(t, func(c *egress.Config) {
		c.MaxRequestBytes = 4
		c.MaxResponseBytes = 5 // "origin ok" is 9 bytes
		c.Rules = append(c.Rules, airlock.NetRule{Host: "up.test", Methods: []string{"PUT"}, Ports: c.Rules[0].Ports})
		_ = c.Hosts.Add("up.test", netip.MustParseAddr("127.0.0.1"))
	})
	proxy := env.ProxyClient(false, "")
	resp, err := proxy.Get("http://origin.test:" + env.HTTPPort + "/ok")
	if err == nil {
		body, rerr := io.ReadAll(resp.Body)
		resp.Body.Close()
		if rerr == nil && string(body) == "origin ok" {
			t.Errorf("response over the cap passed whole: %s %q", resp.Status, body)
		}
	}
	req, _ := http.NewRequest("PUT", "http://up.test:"+env.HTTPPort+"/ok", strings.NewReader("more than four bytes"))
	resp, err = proxy.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("request over the cap: %s", resp.Status)
	}
	req, _ = http.NewRequest("PUT", "http://up.test:"+env.HTTPPort+"/ok", strings.NewReader("more than four bytes"))
	if _, err := env.GW.RoundTrip(req); err == nil {
		t.Error("in-process request over the cap was sent")
	}
	logs := env.TakeLogs()
	found := false
	for _, l := range logs {
		found = found || (l.Verdict == egress.Deny && strings.Contains(l.Reason, "cap"))
	}
	if !found {
		t.Errorf("caps not logged: %+v", logs)
	}
}

func TestDNSRateLimit(t *testing.T) {
	env := newTestEnv(t, func(c *egress.Config) { c.DNSRate = 0.001; c.DNSBurst = 3 })
	cl := &dns.Client{Net: "udp", Timeout: 5 * time.Second}
	var rcodes []int
	for i := 0; i < 5; i++ {
		r, _, err := cl.Exchange(new(dns.Msg).SetQuestion("origin.test.", dns.TypeA), env.GW.DNSAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		rcodes = append(rcodes, r.Rcode)
	}
	if rcodes[0] != dns.RcodeSuccess || rcodes[4] != dns.RcodeRefused {
		t.Errorf("rcodes %v: want the burst answered, then refusals", rcodes)
	}
	if !hasReason(env.TakeLogs(), "rate limit") {
		t.Error("rate limiting not logged")
	}
}

func hasReason(logs []egress.Record, s string) bool {
	for _, l := range logs {
		if strings.Contains(l.Reason, s) {
			return true
		}
	}
	return false
}

// TestDNSFamilies checks that A and AAAA questions are answered per
// family: an IPv4-only granted name has no AAAA records (NOERROR, empty),
// not a failure.
func TestDNSFamilies(t *testing.T) {
	env := newTestEnv(t, nil)
	cl := &dns.Client{Net: "udp", Timeout: 5 * time.Second}
	for _, c := range []struct {
		name    string
		qtype   uint16
		rcode   int
		answers int
	}{
		{"public.test.", dns.TypeA, dns.RcodeSuccess, 1},
		{"public.test.", dns.TypeAAAA, dns.RcodeSuccess, 0},
		{"origin.test.", dns.TypeAAAA, dns.RcodeSuccess, 0},
		{"PUBLIC.Test.", dns.TypeA, dns.RcodeSuccess, 1},
		{"public.test.", dns.TypeCNAME, dns.RcodeSuccess, 0},
		{"private.test.", dns.TypeA, dns.RcodeRefused, 0},
	} {
		r, _, err := cl.Exchange(new(dns.Msg).SetQuestion(c.name, c.qtype), env.GW.DNSAddr().String())
		if err != nil || r.Rcode != c.rcode || len(r.Answer) != c.answers {
			t.Errorf("%s %s: %v %v", c.name, dns.TypeToString[c.qtype], r, err)
		}
	}
}

// TestCloseEndsTunnels checks that closing a gateway ends the CONNECT
// tunnels it opened: no request passes after Close.
func TestCloseEndsTunnels(t *testing.T) {
	env := newTestEnv(t, nil)
	client := env.ProxyClient(false, "")
	client.Transport.(*http.Transport).DisableKeepAlives = false
	url := "https://origin.test:" + env.HTTPSPort + "/ok"
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	env.GW.Close()
	before := env.Hits()
	if resp, err := client.Get(url); err == nil {
		resp.Body.Close()
		t.Errorf("request after Close: %s", resp.Status)
	}
	if env.Hits() != before {
		t.Error("the origin was reached after Close")
	}
}

// TestConnectionsBounded: a sandbox cannot make the gateway hold more
// connections than MaxConns (each may hold a request head of up to a MiB
// and a form body): the next, on the TCP listener or the socket, is
// answered 503 and logged, and a slot freed is served again.
func TestConnectionsBounded(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "g.sock")
	env := newTestEnv(t, func(c *egress.Config) { c.Socket = sock })
	hp := "origin.test:" + env.HTTPPort
	var held []net.Conn
	for i := 0; i < egress.DefaultMaxConns; i++ {
		c, err := net.Dial("tcp", env.GW.ProxyAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		fmt.Fprintf(c, "GET http://%s/held HTTP/1.1\r\nHost: %s\r\nX-Pad: %s", hp, hp, strings.Repeat("a", 1000)) // a head never finished
		held = append(held, c)
	}
	get := func(c net.Conn) (*http.Response, error) {
		t.Helper()
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		fmt.Fprintf(c, "GET http://%s/over HTTP/1.1\r\nHost: %s\r\n\r\n", hp, hp)
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: "GET"})
		if err == nil {
			io.Copy(io.Discard, resp.Body)
		}
		return resp, err
	}
	time.Sleep(200 * time.Millisecond) // the held connections are being served
	c, err := net.Dial("tcp", env.GW.ProxyAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := get(c); err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("connection %d over TCP: %v %v, want 503", egress.DefaultMaxConns+1, resp, err)
	}
	u, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	u.Write([]byte{egress.StreamHTTP})
	if resp, err := get(u); err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("connection %d over the socket: %v %v, want 503", egress.DefaultMaxConns+2, resp, err)
	}
	if !hasReason(env.TakeLogs(), "too many connections") {
		t.Error("the refused connections were not logged")
	}
	if env.HitsOf("/over") != 0 {
		t.Error("a connection over the bound reached the origin")
	}
	held[0].Close()
	for i := 0; ; i++ {
		c, err := net.Dial("tcp", env.GW.ProxyAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		resp, err := get(c)
		if err == nil && resp.StatusCode == 200 {
			break
		}
		if i == 100 {
			t.Fatalf("a freed slot is not served again: %v %v", resp, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestHeldBodiesBounded: form bodies are read whole to be checked, but a
// gateway holds only a few at once (each up to MaxRequestBytes): a form
// POST waits while others are being read, and goes on once one is sent.
// Empty chunked forms, and refused ones, give their turn back.
func TestHeldBodiesBounded(t *testing.T) {
	env := newTestEnv(t, nil)
	pp := "post.test:" + env.HTTPPort
	dial := func() net.Conn {
		c, err := net.Dial("tcp", env.GW.ProxyAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		return c
	}
	status := func(c net.Conn) int {
		t.Helper()
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: "POST"})
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	for i, body := range []string{"0\r\n\r\n", "0\r\n\r\n", "0\r\n\r\n", "0\r\n\r\n", "b\r\n_method=PUT\r\n0\r\n\r\n", "0\r\n\r\n"} {
		c := dial()
		fmt.Fprintf(c, "POST http://%s/turn%d HTTP/1.1\r\nHost: %s\r\nTransfer-Encoding: chunked\r\n\r\n%s", pp, i, pp, body)
		if s := status(c); s != 200 && !(i == 4 && s == http.StatusForbidden) {
			t.Fatalf("form %d: %d", i, s)
		}
	}
	var slow []net.Conn
	for i := 0; i < 4; i++ {
		c := dial()
		fmt.Fprintf(c, "POST http://%s/slow HTTP/1.1\r\nHost: %s\r\nContent-Length: 6\r\n\r\na=", pp, pp)
		slow = append(slow, c)
	}
	time.Sleep(200 * time.Millisecond) // the four are being read
	c := dial()
	done := make(chan int, 1)
	go func() {
		fmt.Fprintf(c, "POST http://%s/fifth HTTP/1.1\r\nHost: %s\r\nContent-Length: 3\r\n\r\nb=1", pp, pp)
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: "POST"})
		if err != nil {
			done <- 0
			return
		}
		done <- resp.StatusCode
	}()
	select {
	case s := <-done:
		t.Fatalf("a fifth form body was taken while four were held: %d", s)
	case <-time.After(500 * time.Millisecond):
	}
	io.WriteString(slow[0], "1234")
	if s := status(slow[0]); s != 200 {
		t.Errorf("first slow form: %d", s)
	}
	select {
	case s := <-done:
		if s != 200 {
			t.Errorf("fifth form: %d", s)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the fifth form did not go on once a body was sent")
	}
}

// TestHeldBodiesTimeOut: a body held to be checked that does not arrive
// in time is answered 408 and gives its place back, however it is framed
// (and inside a tunnel too), so a few slow clients cannot stop every
// other form from being checked.
func TestHeldBodiesTimeOut(t *testing.T) {
	defer egress.SetHeldBodyTimeout(300 * time.Millisecond)()
	env := newTestEnv(t, nil)
	pp := "post.test:" + env.HTTPPort
	for _, framing := range []string{"Content-Length: 6\r\n\r\na=", "Transfer-Encoding: chunked\r\n\r\n6\r\na="} {
		var slow []net.Conn
		for i := 0; i < 5; i++ { // one more than the gateway holds at once
			c, err := net.Dial("tcp", env.GW.ProxyAddr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(20 * time.Second))
			fmt.Fprintf(c, "POST http://%s/slow HTTP/1.1\r\nHost: %s\r\n%s", pp, pp, framing)
			slow = append(slow, c)
		}
		for i, c := range slow {
			resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: "POST"})
			if err != nil {
				t.Fatalf("%q, client %d: %v", framing, i, err)
			}
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), "request body not complete") {
				t.Errorf("%q, client %d: %d %s", framing, i, resp.StatusCode, body)
			}
		}
	}
	tunnel := "post.test:" + env.HTTPSPort
	resp, err := env.Raw(tunnel, "POST /slow HTTP/1.1\r\nHost: "+tunnel+"\r\nContent-Length: 6\r\n\r\na=")
	if err != nil || resp.StatusCode != http.StatusRequestTimeout {
		t.Errorf("a slow body in a tunnel: %v, %v", resp, err)
	}
}

// TestUpstreamErrorsNameNoResolver: a granted name the upstream does not
// know is answered "no such host", without the address of the host's
// resolver, which the sandbox has no other way to learn.
func TestUpstreamErrorsNameNoResolver(t *testing.T) {
	env := newTestEnv(t, func(c *egress.Config) {
		c.Rules = append(c.Rules, airlock.NetRule{Host: "gone.test", Ports: c.Rules[0].Ports})
	})
	_, err := gatewaylab.UpstreamLookup(env.Upstream)(context.Background(), "ip", "gone.test")
	var de *net.DNSError
	if !errors.As(err, &de) || de.Server == "" {
		t.Fatalf("looking gone.test up directly: %v, want an error naming the resolver", err)
	}
	resp, err := env.ProxyClient(false, "").Get("http://gone.test:" + env.HTTPPort + "/x")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), "no such host") || strings.Contains(string(b), de.Server) {
		t.Errorf("answer %q: want \"no such host\" without the resolver %s", b, de.Server)
	}
	if logs := env.TakeLogs(); len(logs) != 1 || strings.Contains(logs[0].Reason, de.Server) {
		t.Errorf("decisions: %+v", logs)
	}
	if _, err := env.GW.Client().Get("http://gone.test:" + env.HTTPPort + "/x"); err == nil || strings.Contains(err.Error(), de.Server) {
		t.Errorf("in-process client: %v", err)
	}
}

// TestRecordsBounded: what a request writes into a decision record (its
// path, and a reason that may quote it) is cut, so a job sending long
// paths cannot make each record in the operator's log a MiB.
func TestRecordsBounded(t *testing.T) {
	env := newTestEnv(t, nil)
	long := "/a%2f" + strings.Repeat("b", 100_000)
	for _, u := range []string{"http://evil.test:" + env.HTTPPort + long, "http://git.test:" + env.HTTPPort + long + "/info/refs"} {
		resp, err := env.ProxyClient(false, "").Get(u)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("%.40s...: %s", u, resp.Status)
		}
	}
	logs := env.TakeLogs()
	if len(logs) != 2 {
		t.Fatalf("decisions: %d", len(logs))
	}
	for _, r := range logs {
		if len(r.Path) > egress.MaxRecordField || len(r.Reason) > egress.MaxRecordField || !strings.HasSuffix(r.Path, "...") {
			t.Errorf("record of %s: path of %d bytes, reason of %d, want at most %d, cut", r.Host, len(r.Path), len(r.Reason), egress.MaxRecordField)
		}
	}
}

// TestResponseHeadBounded: an origin's response head is bounded as a
// request's is (1 MiB), not by the transport's default of 10 MiB, so a
// granted origin that echoes data into headers cannot make each of the
// gateway's connections hold that much.
func TestResponseHeadBounded(t *testing.T) {
	big, err := gatewaylab.Serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Echo", strings.Repeat("e", 2<<20))
		io.WriteString(w, "big")
	}), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(big.Close)
	port := big.Listener.Addr().(*net.TCPAddr).Port
	env := newTestEnv(t, func(c *egress.Config) {
		c.Rules = append(c.Rules, airlock.NetRule{Host: "big.test", Ports: []int{port}})
		_ = c.Hosts.Add("big.test", netip.MustParseAddr("127.0.0.1"))
	})
	resp, err := env.ProxyClient(false, "").Get(fmt.Sprintf("http://big.test:%d/", port))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway {
		t.Errorf("a 2 MiB response head: %s, want 502", resp.Status)
	}
}

// TestHopHeadersNotForwarded: the origin gets neither hop-by-hop headers,
// nor those the Connection header names, nor any Proxy-* header (meant
// for the proxy, such as credentials a client was configured with).
func TestHopHeadersNotForwarded(t *testing.T) {
	got := make(chan http.Header, 1)
	origin, err := gatewaylab.Serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
	}), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(origin.Close)
	port := origin.Listener.Addr().(*net.TCPAddr).Port
	env := newTestEnv(t, func(c *egress.Config) {
		c.Rules = append(c.Rules, airlock.NetRule{Host: "hdr.test", Ports: []int{port}})
		_ = c.Hosts.Add("hdr.test", netip.MustParseAddr("127.0.0.1"))
	})
	hp := fmt.Sprintf("hdr.test:%d", port)
	resp, err := env.Raw("", "GET http://"+hp+"/ HTTP/1.1\r\nHost: "+hp+"\r\nProxy-Authorization: Basic c2VjcmV0\r\nProxy-Token: secret\r\nConnection: X-Drop\r\nX-Drop: 1\r\nKeep-Alive: 5\r\nX-Keep: 1\r\n\r\n")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%v %v", resp, err)
	}
	h := <-got
	for _, name := range []string{"Proxy-Authorization", "Proxy-Token", "X-Drop", "Keep-Alive"} {
		if v := h.Values(name); len(v) > 0 {
			t.Errorf("%s forwarded: %q", name, v)
		}
	}
	if h.Get("X-Keep") != "1" {
		t.Errorf("X-Keep not forwarded: %v", h)
	}
}

// TestFaultsEndOneConnection: a panic while the gateway handles one
// connection (here, the operator's log sink failing on its first record)
// ends that connection, is recorded, and leaves the gateway, its other
// connections and the process running; in-process, it is the request's
// error.
func TestFaultsEndOneConnection(t *testing.T) {
	var mu sync.Mutex
	var logged []egress.Record
	failed := false
	sink := func(r egress.Record) {
		mu.Lock()
		first := !failed
		failed = true
		if !first {
			logged = append(logged, r)
		}
		mu.Unlock()
		if first {
			panic("the sink failed")
		}
	}
	sock := filepath.Join(t.TempDir(), "g.sock")
	gw, err := egress.Start(context.Background(), egress.Config{Socket: sock, Log: sink})
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	get := func() (*http.Response, error) {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _ = c.Write([]byte{egress.StreamHTTP})
		_, _ = io.WriteString(c, "GET http://evil.test/ HTTP/1.1\r\nHost: evil.test\r\n\r\n")
		return http.ReadResponse(bufio.NewReader(c), nil)
	}
	if resp, err := get(); err == nil {
		resp.Body.Close()
		t.Fatalf("the faulting connection was answered %s, want it ended", resp.Status)
	}
	resp, err := get()
	if err != nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("the next connection: %v %v", resp, err)
	}
	resp.Body.Close()
	// The connection's own deferred close may end it before the fault is
	// recorded: wait for the record (bounded).
	found := false
	for i := 0; !found && i < 500; i++ {
		if i > 0 {
			time.Sleep(10 * time.Millisecond)
		}
		mu.Lock()
		for _, r := range logged {
			found = found || strings.Contains(r.Reason, "internal error, connection ended: the sink failed")
		}
		mu.Unlock()
	}
	if !found {
		mu.Lock()
		t.Errorf("the fault was not recorded: %+v", logged)
		mu.Unlock()
	}

	mu.Lock()
	failed = false
	mu.Unlock()
	if _, err := gw.Client().Get("http://evil.test/"); err == nil || !strings.Contains(err.Error(), "internal error, request ended") {
		t.Errorf("in-process, the fault: %v", err)
	}
}

// TestWildcardLookupsRateLimited: a name only a wildcard rule grants has
// labels the job chooses, and every upstream lookup of one carries them
// to whoever runs the zone's name servers. Lookups the proxy makes to
// dial such names share the resolver's rate limit, so a job cannot send
// data in labels faster through the proxy than through the resolver,
// even when the lookups fail. Names an exact rule grants are not limited.
func TestWildcardLookupsRateLimited(t *testing.T) {
	var mu sync.Mutex
	looked := map[string]int{}
	var logs []egress.Record
	gw, err := egress.Start(context.Background(), egress.Config{
		Rules: []airlock.NetRule{{Host: "*.wild.test"}, {Host: "exact.test"}},
		Log: func(r egress.Record) {
			mu.Lock()
			logs = append(logs, r)
			mu.Unlock()
		},
		DNSRate:  0.001,
		DNSBurst: 3,
		Lookup: func(ctx context.Context, network, host string) ([]netip.Addr, error) {
			mu.Lock()
			looked[host]++
			mu.Unlock()
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	for i := 0; i < 10; i++ {
		for _, host := range []string{fmt.Sprintf("data%d.wild.test", i), "exact.test"} {
			r, _ := http.NewRequest("GET", "http://"+host+"/", nil)
			if resp, err := gw.RoundTrip(r); err == nil {
				resp.Body.Close()
				t.Fatalf("%s: %s", host, resp.Status)
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	wild := 0
	for h, n := range looked {
		if strings.HasSuffix(h, ".wild.test") {
			wild += n
		}
	}
	if wild > 3 {
		t.Errorf("%d upstream lookups of names under *.wild.test, want at most the burst of 3", wild)
	}
	if !hasReason(logs, "lookup rate limit exceeded") {
		t.Error("refusals over the limit not logged")
	}
	if looked["exact.test"] != 10 {
		t.Errorf("%d lookups of exact.test, want 10 (an exact name is not rate limited)", looked["exact.test"])
	}
}

// TestDNSConnectionsBounded: the resolver's TCP connections take the
// gateway's slots too: one over MaxConns is closed and logged, and a slot
// freed serves a query again.
func TestDNSConnectionsBounded(t *testing.T) {
	env := newTestEnv(t, func(c *egress.Config) { c.MaxConns = 2 })
	addr := env.GW.DNSAddr().String()
	dial := func() net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	held := []net.Conn{dial(), dial()}
	time.Sleep(200 * time.Millisecond) // the held connections are accepted
	over := dial()
	// Closed at once: within the second before the DNS server's own
	// read timeout (two) would close an idle connection anyway.
	_ = over.SetReadDeadline(time.Now().Add(time.Second))
	if n, err := over.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("connection 3 of 2: read %d, %v; want it closed", n, err)
	}
	if !hasReason(env.TakeLogs(), "too many connections") {
		t.Error("the refused connection was not logged")
	}
	held[0].Close()
	q := new(dns.Msg)
	q.SetQuestion("origin.test.", dns.TypeA)
	for i := 0; ; i++ {
		in, _, err := (&dns.Client{Net: "tcp", Timeout: 2 * time.Second}).Exchange(q, addr)
		if err == nil && in.Rcode == dns.RcodeSuccess {
			break
		}
		if i == 100 {
			t.Fatalf("a freed slot is not served again: %v %v", in, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
