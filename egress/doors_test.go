package egress_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/corpus/runner/gatewaylab"
	"github.com/airlock-sandbox/airlock/egress"
)

// rawCase is one request written byte for byte to the proxy, or inside a
// TLS tunnel to tunnel (host:port). path is what the origin would see: a
// refused request must not reach it, an allowed one must, once.
type rawCase struct {
	name, tunnel, raw, path string
	allow                   bool
	reason                  string // part of the refusal's logged reason
}

func runRaw(t *testing.T, env *gatewaylab.Env, cases []rawCase) {
	t.Helper()
	for _, c := range cases {
		env.TakeLogs()
		before := env.HitsOf(c.path)
		resp, err := env.Raw(c.tunnel, c.raw)
		got := err == nil && resp.StatusCode < 400 && resp.Header.Get("X-Origin") == "yes"
		detail := ""
		if err != nil {
			detail = err.Error()
		} else {
			b, _ := io.ReadAll(resp.Body)
			detail = resp.Status + ": " + string(b)
		}
		hits := env.HitsOf(c.path) - before
		logs := env.TakeLogs()
		switch {
		case got != c.allow:
			t.Errorf("%s: allowed=%v, want %v (%s)", c.name, got, c.allow, strings.TrimSpace(detail))
		case c.allow && hits != 1:
			t.Errorf("%s: the origin saw %s %d times", c.name, c.path, hits)
		case !c.allow && hits != 0:
			t.Errorf("%s: refused, but the origin saw %s", c.name, c.path)
		case !c.allow && !decided(logs, egress.Deny, c.reason):
			t.Errorf("%s: no refusal mentioning %q logged: %+v", c.name, c.reason, logs)
		case c.allow && !decided(logs, egress.Allow, ""):
			t.Errorf("%s: no allow decision logged: %+v", c.name, logs)
		}
	}
}

func decided(logs []egress.Record, v egress.Verdict, reason string) bool {
	for _, l := range logs {
		if l.Verdict == v && strings.Contains(l.Reason, reason) && l.Job == gatewaylab.JobName && l.Via != "" && !l.Time.IsZero() {
			return true
		}
	}
	return false
}

// TestBodyRefusedOnGetAndHead: a GET, HEAD or OPTIONS carrying a body (by length
// or chunked) is refused at every door, so a read-only grant is not a
// write channel; the same request without a body, and a body on a method
// the rule grants, pass.
func TestBodyRefusedOnGetAndHead(t *testing.T) {
	env := newTestEnv(t, nil)
	hp := "origin.test:" + env.HTTPPort
	tp := "origin.test:" + env.HTTPSPort
	op := "opts.test:" + env.HTTPPort
	otp := "opts.test:" + env.HTTPSPort
	req := func(method, target, host, path, extra string) string {
		return method + " " + target + path + " HTTP/1.1\r\nHost: " + host + "\r\n" + extra
	}
	const cl = "Content-Length: 6\r\n\r\nsecret"
	const te = "Transfer-Encoding: chunked\r\n\r\n6\r\nsecret\r\n0\r\n\r\n"
	runRaw(t, env, []rawCase{
		{"proxy GET with content", "", req("GET", "http://"+hp, hp, "/b1", cl), "/b1", false, "body"},
		{"proxy GET chunked", "", req("GET", "http://"+hp, hp, "/b2", te), "/b2", false, "body"},
		{"proxy HEAD with content", "", req("HEAD", "http://"+hp, hp, "/b3", cl), "/b3", false, "body"},
		{"proxy HEAD chunked", "", req("HEAD", "http://"+hp, hp, "/b4", te), "/b4", false, "body"},
		{"tunnel GET with content", tp, req("GET", "", tp, "/b5", cl), "/b5", false, "body"},
		{"tunnel GET chunked", tp, req("GET", "", tp, "/b6", te), "/b6", false, "body"},
		{"tunnel HEAD chunked", tp, req("HEAD", "", tp, "/b7", te), "/b7", false, "body"},
		{"proxy GET", "", req("GET", "http://"+hp, hp, "/b8", "\r\n"), "/b8", true, ""},
		{"proxy GET with Content-Length 0", "", req("GET", "http://"+hp, hp, "/b9", "Content-Length: 0\r\n\r\n"), "/b9", true, ""},
		{"tunnel HEAD", tp, req("HEAD", "", tp, "/b10", "\r\n"), "/b10", true, ""},
		{"proxy POST to a POST host", "", req("POST", "http://post.test:"+env.HTTPPort, "post.test:"+env.HTTPPort, "/b11", cl), "/b11", true, ""},
		{"tunnel POST chunked to a POST host", "post.test:" + env.HTTPSPort, req("POST", "", "post.test:"+env.HTTPSPort, "/b12", te), "/b12", true, ""},
		// OPTIONS is as read-only as GET: a rule granting it is no write
		// channel either.
		{"proxy OPTIONS with content", "", req("OPTIONS", "http://"+op, op, "/b15", cl), "/b15", false, "body"},
		{"proxy OPTIONS chunked", "", req("OPTIONS", "http://"+op, op, "/b16", te), "/b16", false, "body"},
		{"tunnel OPTIONS with content", otp, req("OPTIONS", "", otp, "/b17", cl), "/b17", false, "body"},
		{"proxy lower-case options chunked", "", req("options", "http://"+op, op, "/b18", te), "/b18", false, "body"},
		{"proxy OPTIONS", "", req("OPTIONS", "http://"+op, op, "/b19", "\r\n"), "/b19", true, ""},
	})

	// The in-process client (WASM and Starlark tiers): a body of known
	// length, and one of unknown length (sent chunked).
	for _, c := range []struct {
		method, hostPort string
		body             io.Reader
	}{
		{"GET", hp, strings.NewReader("secret")},
		{"GET", hp, io.MultiReader(strings.NewReader("secret"))},
		{"HEAD", hp, strings.NewReader("secret")},
		{"OPTIONS", op, strings.NewReader("secret")},
		{"OPTIONS", op, io.MultiReader(strings.NewReader("secret"))},
	} {
		env.TakeLogs()
		r, _ := http.NewRequest(c.method, "http://"+c.hostPort+"/b13", c.body)
		resp, err := env.GW.RoundTrip(r)
		var d *airlock.Denied
		if err == nil {
			resp.Body.Close()
			t.Errorf("client %s with a body: %s", c.method, resp.Status)
		} else if !errors.As(err, &d) || d.Capability != "net" {
			t.Errorf("client %s with a body: %v, want *airlock.Denied{net}", c.method, err)
		}
		if !decided(env.TakeLogs(), egress.Deny, "body") {
			t.Errorf("client %s with a body: refusal not logged", c.method)
		}
	}
	if n := env.HitsOf("/b13"); n != 0 {
		t.Errorf("the origin saw %d client requests with a body", n)
	}
	r, _ := http.NewRequest("GET", "https://"+tp+"/b14", nil)
	if resp, err := env.GW.RoundTrip(r); err != nil {
		t.Errorf("client GET without a body: %v", err)
	} else {
		resp.Body.Close()
	}
}

// TestHostHeaderMismatch: an absolute-form request whose Host header names
// another host (or port) than its URL is refused, at the proxy and inside
// a tunnel, where an absolute URL must also be the tunnel's (https, its
// host and port); so is a CONNECT whose Host is not its authority.
func TestHostHeaderMismatch(t *testing.T) {
	env := newTestEnv(t, nil)
	p, ps := env.HTTPPort, env.HTTPSPort
	tp := "origin.test:" + ps
	get := func(target, host string) string {
		return "GET " + target + " HTTP/1.1\r\nHost: " + host + "\r\n\r\n"
	}
	runRaw(t, env, []rawCase{
		{"proxy: another host", "", get("http://origin.test:"+p+"/h1", "evil.test:"+p), "/h1", false, "Host"},
		{"proxy: another host, no port", "", get("http://origin.test:"+p+"/h2", "evil.test"), "/h2", false, "Host"},
		{"proxy: another port", "", get("http://origin.test:"+p+"/h3", "origin.test:1"), "/h3", false, "Host"},
		{"proxy: HTTP/1.0, another host", "", "GET http://origin.test:" + p + "/h4 HTTP/1.0\r\nHost: evil.test\r\n\r\n", "/h4", false, "Host"},
		{"tunnel: absolute URL, another Host", tp, get("https://"+tp+"/h5", "evil.test"), "/h5", false, "Host"},
		{"tunnel: absolute URL to another host", tp, get("https://evil.test:"+ps+"/h6", tp), "/h6", false, ""},
		{"tunnel: http URL in a TLS tunnel", tp, get("http://"+tp+"/h7", tp), "/h7", false, "scheme"},
		{"tunnel: origin-form, another Host", tp, get("/h8", "evil.test:"+ps), "/h8", false, "Host"},
		{"CONNECT: another Host", "", "CONNECT " + tp + " HTTP/1.1\r\nHost: evil.test:" + ps + "\r\n\r\n", "/h13", false, "Host"},
		{"proxy: same host, other spelling", "", get("http://origin.test:"+p+"/h9", "ORIGIN.test.:"+p), "/h9", true, ""},
		{"proxy: same host, port left out", "", get("http://origin.test:"+p+"/h10", "origin.test"), "/h10", true, ""},
		{"proxy: HTTP/1.0 without Host", "", "GET http://origin.test:" + p + "/h11 HTTP/1.0\r\n\r\n", "/h11", true, ""},
		{"tunnel: absolute URL, same host", tp, get("https://"+tp+"/h12", tp), "/h12", true, ""},
	})
}

// TestPathAndSchemeRules: rules naming paths and a scheme hold at every
// door. git.test may be cloned (GET */info/refs, POST */git-upload-pack)
// but not pushed to; plain.test is http only, tls.test https only. A path
// that hides its shape is refused on a rule with paths.
func TestPathAndSchemeRules(t *testing.T) {
	env := newTestEnv(t, nil)
	p, ps := env.HTTPPort, env.HTTPSPort
	gp, gs := "git.test:"+p, "git.test:"+ps
	get := func(target, host string) string {
		return "GET " + target + " HTTP/1.1\r\nHost: " + host + "\r\n\r\n"
	}
	post := func(target, host string) string {
		return "POST " + target + " HTTP/1.1\r\nHost: " + host + "\r\nContent-Type: application/x-git-upload-pack-request\r\nContent-Length: 4\r\n\r\n0000"
	}
	const refs = "/org/repo.git/info/refs"
	runRaw(t, env, []rawCase{
		{"proxy: clone refs", "", get("http://"+gp+refs+"?service=git-upload-pack", gp), refs, true, ""},
		{"proxy: clone pack", "", post("http://"+gp+"/org/repo.git/git-upload-pack", gp), "/org/repo.git/git-upload-pack", true, ""},
		{"proxy: push pack", "", post("http://"+gp+"/org/repo.git/git-receive-pack", gp), "/org/repo.git/git-receive-pack", false, "path"},
		{"proxy: push refs by POST", "", post("http://"+gp+refs, gp), refs, false, "POST"},
		{"proxy: another path", "", get("http://"+gp+"/org/repo.git/HEAD", gp), "/org/repo.git/HEAD", false, "path"},
		{"proxy: GET on the POST path", "", get("http://"+gp+"/org/repo.git/git-upload-pack", gp), "/org/repo.git/git-upload-pack", false, "GET"},
		{"tunnel: clone refs", gs, get(refs+"?service=git-upload-pack", gs), refs, true, ""},
		{"tunnel: clone pack", gs, post("/org/repo.git/git-upload-pack", gs), "/org/repo.git/git-upload-pack", true, ""},
		{"tunnel: push pack", gs, post("/org/repo.git/git-receive-pack", gs), "/org/repo.git/git-receive-pack", false, "path"},
		// Paths that hide their shape: what the origin makes of them is
		// not what the rule was matched on.
		{"encoded slash", "", get("http://"+gp+"/x/..%2finfo/refs", gp), "/x/../info/refs", false, "slash"},
		{"encoded slash, upper case", gs, get("/x/..%2Finfo/refs", gs), "/x/../info/refs", false, "slash"},
		{"dot-dot segment", "", get("http://"+gp+"/org/../admin/info/refs", gp), "/org/../admin/info/refs", false, "segment"},
		{"encoded dot-dot", "", get("http://"+gp+"/org/%2e%2e/admin/info/refs", gp), "/org/../admin/info/refs", false, "segment"},
		{"half-encoded dot-dot", gs, get("/org/.%2E/admin/info/refs", gs), "/org/../admin/info/refs", false, "segment"},
		{"dot segment", "", get("http://"+gp+"/org/./info/refs", gp), "/org/./info/refs", false, "segment"},
		{"dot-dot with a parameter", "", get("http://"+gp+"/org/..;x/admin/info/refs", gp), "/org/..;x/admin/info/refs", false, "segment"},
		{"empty segment", "", get("http://"+gp+"/org//info/refs", gp), "/org//info/refs", false, "empty"},
		{"path parameter", "", post("http://"+gp+"/org/repo.git/git-receive-pack;/git-upload-pack", gp), "/org/repo.git/git-receive-pack;/git-upload-pack", false, "';'"},
		{"encoded backslash", "", get("http://"+gp+"/org/..%5cadmin/info/refs", gp), "/org/..\\admin/info/refs", false, "backslash"},
		{"double encoding", "", get("http://"+gp+"/org/%252e%252e/admin/info/refs", gp), "/org/%2e%2e/admin/info/refs", false, "percent"},
		{"overlong dot", "", get("http://"+gp+"/org/%c0%ae%c0%ae/admin/info/refs", gp), "/org/\xc0\xae\xc0\xae/admin/info/refs", false, "UTF-8"},
		{"encoded but plain path", "", get("http://"+gp+"/org/r%65po.git/info/refs", gp), "/org/repo.git/info/refs", true, ""},
		// Schemes.
		{"http rule over http", "", get("http://plain.test:"+p+"/s1", "plain.test:"+p), "/s1", true, ""},
		{"http rule over https", "plain.test:" + ps, get("/s2", "plain.test:"+ps), "/s2", false, "scheme"},
		{"https rule over https", "tls.test:" + ps, get("/s3", "tls.test:"+ps), "/s3", true, ""},
		{"https rule over http", "", get("http://tls.test:"+p+"/s4", "tls.test:"+p), "/s4", false, "scheme"},
	})

	// The in-process client.
	for _, c := range []struct {
		method, url string
		allow       bool
	}{
		{"GET", "https://" + gs + refs + "?service=git-upload-pack", true},
		{"POST", "https://" + gs + "/org/repo.git/git-upload-pack", true},
		{"POST", "https://" + gs + "/org/repo.git/git-receive-pack", false},
		{"GET", "http://" + gp + "/org/%2e%2e/info/refs", false},
		{"GET", "https://plain.test:" + ps + "/c1", false},
		{"GET", "http://tls.test:" + p + "/c2", false},
		{"GET", "http://plain.test:" + p + "/c3", true},
	} {
		var body io.Reader
		if c.method == "POST" {
			body = strings.NewReader("0000")
		}
		r, _ := http.NewRequest(c.method, c.url, body)
		resp, err := env.GW.RoundTrip(r)
		if err == nil {
			resp.Body.Close()
		}
		if (err == nil) != c.allow {
			t.Errorf("client %s %s: %v, want allowed=%v", c.method, c.url, err, c.allow)
		}
	}
}

// TestMalformedRequestsLogged: a request the proxy cannot parse is
// answered with an error and leaves a decision record, at the proxy and
// inside a tunnel.
func TestMalformedRequestsLogged(t *testing.T) {
	env := newTestEnv(t, nil)
	p := env.HTTPPort
	tp := "origin.test:" + env.HTTPSPort
	u := "http://origin.test:" + p
	runRaw(t, env, []rawCase{
		{"not HTTP", "", "HELLO\r\n\r\n", "/", false, "malformed request"},
		{"two Host headers", "", "GET " + u + "/m1 HTTP/1.1\r\nHost: origin.test:" + p + "\r\nHost: evil.test\r\n\r\n", "/m1", false, "malformed request"},
		{"no Host header", "", "GET " + u + "/m2 HTTP/1.1\r\n\r\n", "/m2", false, "malformed request"},
		{"bad header name", "", "GET " + u + "/m3 HTTP/1.1\r\nHost: origin.test:" + p + "\r\nBad Name: x\r\n\r\n", "/m3", false, "malformed request"},
		{"unknown transfer coding", "", "POST http://post.test:" + p + "/m4 HTTP/1.1\r\nHost: post.test:" + p + "\r\nTransfer-Encoding: gzip\r\n\r\n", "/m4", false, "malformed request"},
		{"length and chunked", "", "POST http://post.test:" + p + "/m10 HTTP/1.1\r\nHost: post.test:" + p + "\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\na=1\r\n0\r\n\r\n", "/m10", false, "malformed request"},
		{"empty lines only", "", strings.Repeat("\r\n", 8), "/", false, "malformed request"},
		{"conflicting lengths", "", "POST http://post.test:" + p + "/m5 HTTP/1.1\r\nHost: post.test:" + p + "\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", "/m5", false, "malformed request"},
		{"HTTP/2 preface", "", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "/", false, "malformed request"},
		{"bad version", "", "GET " + u + "/m6 HTTP/9.9\r\nHost: origin.test:" + p + "\r\n\r\n", "/m6", false, "malformed request"},
		{"tunnel: not HTTP", tp, "HELLO\r\n\r\n", "/", false, "malformed request"},
		{"tunnel: two Host headers", tp, "GET /m7 HTTP/1.1\r\nHost: " + tp + "\r\nHost: evil.test\r\n\r\n", "/m7", false, "malformed request"},
	})

	// The record says where the request came from.
	env.TakeLogs()
	_, _ = env.Raw("", "GET "+u+"/m8 HTTP/1.1\r\nHost: origin.test:"+p+"\r\nHost: evil.test\r\n\r\n")
	logs := env.TakeLogs()
	if len(logs) != 1 || logs[0].Via != "http" || logs[0].Method != "GET" || !strings.HasPrefix(logs[0].Remote, "127.0.0.1:") {
		t.Errorf("malformed request's record: %+v", logs)
	}

	// Plain HTTP where the tunnel's TLS should start.
	c, err := net.Dial("tcp", env.GW.ProxyAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", tp, tp)
	br := bufio.NewReader(c)
	if resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"}); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	fmt.Fprintf(c, "GET /m9 HTTP/1.1\r\nHost: %s\r\n\r\n", tp)
	_, _ = io.Copy(io.Discard, br) // the gateway ends the connection
	if logs := env.TakeLogs(); !decided(logs, egress.Deny, "no TLS handshake") {
		t.Errorf("plain HTTP in a tunnel: %+v", logs)
	}
	if env.HitsOf("/m9") != 0 {
		t.Error("plain HTTP in a tunnel reached the origin")
	}
}

// TestProxyConnections: the proxy's own HTTP/1.x serving keeps a
// connection across requests (pipelined too, each checked on its own, a
// refusal ending the connection), answers 100 Continue only
// once a request is allowed, and ends HTTP/1.0 connections after the
// answer.
func TestProxyConnections(t *testing.T) {
	env := newTestEnv(t, nil)
	hp := "origin.test:" + env.HTTPPort
	pp := "post.test:" + env.HTTPPort
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", env.GW.ProxyAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		return c, bufio.NewReader(c)
	}
	read := func(br *bufio.Reader, method string) (*http.Response, string) {
		t.Helper()
		resp, err := http.ReadResponse(br, &http.Request{Method: method})
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, string(b)
	}

	// Pipelined: three requests written at once, three answers in order.
	c, br := dial()
	fmt.Fprintf(c, "GET http://%s/k1 HTTP/1.1\r\nHost: %s\r\n\r\nPOST http://%s/k2 HTTP/1.1\r\nHost: %s\r\nContent-Length: 3\r\n\r\na=1HEAD http://%s/k3 HTTP/1.1\r\nHost: %s\r\n\r\n", hp, hp, pp, pp, hp, hp)
	for _, m := range []string{"GET", "POST", "HEAD"} {
		if resp, body := read(br, m); resp.StatusCode != 200 || (m != "HEAD" && body != "origin ok") {
			t.Errorf("pipelined %s: %s %q", m, resp.Status, body)
		}
	}
	if env.HitsOf("/k1")+env.HitsOf("/k2")+env.HitsOf("/k3") != 3 {
		t.Error("the origin did not see the three pipelined requests")
	}

	// Pipelined behind an allowed request: one for another host, then one
	// for another method. The second is refused and ends the connection;
	// the third is never read.
	c, br = dial()
	fmt.Fprintf(c, "GET http://%s/q1 HTTP/1.1\r\nHost: %s\r\n\r\nGET http://evil.test:%s/q2 HTTP/1.1\r\nHost: evil.test:%s\r\n\r\nDELETE http://%s/q3 HTTP/1.1\r\nHost: %s\r\n\r\n", hp, hp, env.HTTPPort, env.HTTPPort, hp, hp)
	if resp, _ := read(br, "GET"); resp.StatusCode != 200 {
		t.Errorf("pipelined, first: %s", resp.Status)
	}
	if resp, _ := read(br, "GET"); resp.StatusCode != http.StatusForbidden {
		t.Errorf("pipelined, to another host: %s", resp.Status)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("connection not ended after a pipelined refusal: %v", err)
	}
	if env.HitsOf("/q2")+env.HitsOf("/q3") != 0 {
		t.Error("a request pipelined behind an allowed one reached the origin unchecked")
	}

	// Expect: 100-continue, allowed: 100, then the body, then the answer.
	c, br = dial()
	fmt.Fprintf(c, "POST http://%s/k4 HTTP/1.1\r\nHost: %s\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n", pp, pp)
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "HTTP/1.1 100 ") {
		t.Fatalf("100 Continue: %q %v", line, err)
	}
	br.ReadString('\n')
	io.WriteString(c, "a=1")
	if resp, body := read(br, "POST"); resp.StatusCode != 200 || body != "origin ok" {
		t.Errorf("after 100 Continue: %s %q", resp.Status, body)
	}

	// Expect: 100-continue, refused: no 100, a refusal, the end.
	c, br = dial()
	fmt.Fprintf(c, "POST http://%s/k5 HTTP/1.1\r\nHost: %s\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n", hp, hp)
	if resp, _ := read(br, "POST"); resp.StatusCode != http.StatusForbidden {
		t.Errorf("refused with Expect: %s", resp.Status)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("connection not ended after a refusal: %v", err)
	}

	// A large body the origin answers before reading: the transport may
	// still be sending it when the answer is back (run with -race). The
	// connection then carries on or ends, never mixes the two.
	for _, expect := range []string{"", "Expect: 100-continue\r\n"} {
		c, br = dial()
		big := strings.Repeat("x", 2<<20)
		fmt.Fprintf(c, "POST http://%s/k7 HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n%s\r\n", pp, pp, len(big), expect)
		go func(c net.Conn) {
			io.WriteString(c, big)
			fmt.Fprintf(c, "GET http://%s/k8 HTTP/1.1\r\nHost: %s\r\n\r\n", hp, hp)
		}(c)
		resp, err := http.ReadResponse(br, &http.Request{Method: "POST"})
		for err == nil && resp.StatusCode == http.StatusContinue {
			resp, err = http.ReadResponse(br, &http.Request{Method: "POST"})
		}
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("large POST (%q): %v %v", expect, resp, err)
		}
		io.Copy(io.Discard, resp.Body)
		if resp, err := http.ReadResponse(br, &http.Request{Method: "GET"}); err == nil && resp.StatusCode != 200 {
			t.Errorf("the request after a large POST (%q): %s", expect, resp.Status)
		}
	}

	// HTTP/1.0: the answer, then the end.
	c, br = dial()
	fmt.Fprintf(c, "GET http://%s/k6 HTTP/1.0\r\n\r\n", hp)
	if resp, body := read(br, "GET"); resp.StatusCode != 200 || body != "origin ok" {
		t.Errorf("HTTP/1.0: %s %q", resp.Status, body)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("HTTP/1.0 connection not ended: %v", err)
	}
	if env.HitsOf("/k5") != 0 {
		t.Error("the refused request reached the origin")
	}
}
