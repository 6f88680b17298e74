package server_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/server"
)

// TestLargeBodiesWaitForSlots: bodies past a MiB are read two at a time
// per tenant and four at a time in all: a third from a tenant still
// sending two, and a fifth in all, are refused as overloaded (429) once
// the queue wait passes, before the server holds them; small bodies are
// never held up, and once the large ones end their slots are free again.
func TestLargeBodiesWaitForSlots(t *testing.T) {
	const keyC = "test-key-tenant-c-0123456789abcdef"
	f := newFixture(t, func(c *server.Config) {
		third := c.Tenants[1]
		third.Name, third.KeySHA256 = "c", server.HashKey(keyC)
		c.Tenants = append(c.Tenants, third)
	})
	type stalled struct {
		w    *io.PipeWriter
		resp chan *http.Response
	}
	send := func(key string) stalled {
		pr, pw := io.Pipe()
		s := stalled{w: pw, resp: make(chan *http.Response, 1)}
		t.Cleanup(func() { pw.CloseWithError(io.ErrUnexpectedEOF) }) // on a failure too
		req, _ := http.NewRequestWithContext(context.Background(), "POST", f.http.URL+"/v1/run", pr)
		req.Header.Set("Authorization", "Bearer "+key)
		go func() {
			resp, err := f.http.Client().Do(req)
			if err != nil {
				s.resp <- nil
				return
			}
			s.resp <- resp
		}()
		// A job whose code runs past a MiB, sent in part.
		go pw.Write(append([]byte(`{"kind":"expr","code":"`), bytes.Repeat([]byte(" "), 3<<20/2)...))
		return s
	}
	refused := func(what string, s stalled, slots string) {
		t.Helper()
		select {
		case resp := <-s.resp:
			if resp == nil || resp.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("%s: %v", what, resp)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !strings.Contains(string(body), "too many large requests") || !strings.Contains(string(body), slots) || resp.Header.Get("Retry-After") == "" {
				t.Errorf("%s: %s (Retry-After %q), want a refusal naming %s", what, body, resp.Header.Get("Retry-After"), slots)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s was neither read nor refused", what)
		}
		s.w.Close()
	}
	var held []stalled
	for range 2 {
		held = append(held, send(keyA))
	}
	time.Sleep(200 * time.Millisecond) // both are past a MiB, holding their slots
	refused("a tenant's third large body", send(keyA), "one of 2 slots")
	for range 2 {
		held = append(held, send(keyB))
	}
	time.Sleep(200 * time.Millisecond)
	refused("a fifth large body in all", send(keyC), "one of 4 slots")
	if r := f.do("POST", "/v1/run", keyA, `{"kind":"expr","code":"1 + 2"}`); r.status != 200 {
		t.Errorf("a small body while large ones are held: %d %s", r.status, r.body)
	}
	for _, s := range held {
		s.w.Write([]byte(`1"}`))
		s.w.Close()
		if resp := <-s.resp; resp != nil {
			resp.Body.Close()
		}
	}
	// Past a MiB in JSON white space, between the fields.
	r := f.do("POST", "/v1/run", keyA, `{"kind":"expr",`+strings.Repeat(" ", 3<<20/2)+`"code":"1 + 2"}`)
	if r.status != 200 {
		t.Errorf("a large body once the slots are free: %d %.200s", r.status, r.body)
	}
}

// TestRefusalsDoNotWaitForBodies: a request without a valid key that
// declares a body and never sends it is answered 401 at once, on the API
// and on MCP, and its connection is closed rather than kept waiting.
func TestRefusalsDoNotWaitForBodies(t *testing.T) {
	f := newFixture(t)
	addr := strings.TrimPrefix(f.http.URL, "http://")
	for _, path := range []string{"/v1/run", "/mcp"} {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 200000\r\n\r\n{", path)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		conn.Close()
		if err != nil {
			t.Fatalf("%s: no answer without the body: %v", path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || !resp.Close {
			t.Errorf("%s: %d, close %v; want 401 and the connection closed", path, resp.StatusCode, resp.Close)
		}
	}
}

// TestConsoleFormsAreSmall: the sign-in form, read before anyone is known,
// is read up to 64 KiB, not the form parser's 10 MB: a request declaring
// a megabyte is answered once that much has come, without waiting for the
// rest.
func TestConsoleFormsAreSmall(t *testing.T) {
	f := newFixture(t)
	addr := strings.TrimPrefix(f.http.URL, "http://")
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(conn, "POST /console/signin HTTP/1.1\r\nHost: %s\r\nOrigin: http://%s\r\nCookie: airlock_console_pre=x\r\n"+
		"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: %d\r\n\r\ncsrf=x&key=", addr, addr, 1<<20)
	go conn.Write(bytes.Repeat([]byte("k"), 128<<10)) // then nothing more
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer before the rest of the body: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("status %d, want 403", resp.StatusCode)
	}
}

// TestSlowBodiesTimeOut: a body that stops arriving is given up once the
// read deadline passes, with an answer, rather than holding its
// connection.
func TestSlowBodiesTimeOut(t *testing.T) {
	defer server.SetBodyReadTimeout(time.Second)()
	f := newFixture(t)
	conn, err := net.Dial("tcp", strings.TrimPrefix(f.http.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "POST /v1/run HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 1000\r\n\r\n{\"kind\"", keyA)
	start := time.Now()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer once the deadline passed: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || time.Since(start) > 5*time.Second {
		t.Errorf("status %d after %v; want 400 after about a second", resp.StatusCode, time.Since(start))
	}
}

// MCPHandler alone (what airlock mcp --http serves) bounds how long a
// body may take to arrive too: a tenant trickling an MCP message holds
// neither its connection nor a large-body slot for ever.
func TestSlowMCPBodiesTimeOut(t *testing.T) {
	defer server.SetBodyReadTimeout(time.Second)()
	f := newFixture(t)
	hs := httptest.NewServer(f.srv.MCPHandler())
	defer hs.Close()
	conn, err := net.Dial("tcp", strings.TrimPrefix(hs.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "POST /mcp HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 1000\r\n\r\n{\"jsonrpc\"", conn.RemoteAddr(), keyA)
	start := time.Now()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer once the deadline passed: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || time.Since(start) > 5*time.Second {
		t.Errorf("status %d after %v; want 400 after about a second", resp.StatusCode, time.Since(start))
	}
}
