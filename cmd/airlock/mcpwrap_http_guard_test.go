//go:build !lean

package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/httpguard"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const guardKey = "wrap-guard-key-0a1b2c3d4e"

// serveGuarded serves mcp-wrap's /mcp handler for a relay server on a real
// loopback socket, as serveWrapHTTP does, and returns its address.
func serveGuarded(t *testing.T, bodyTimeout time.Duration) string {
	t.Helper()
	srv := mcp.NewServer(&mcp.Implementation{Name: "relay", Version: "1"}, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	hs := httpguard.NewServer(wrapHTTPHandler(srv, []byte(guardKey), bodyTimeout))
	done := make(chan struct{})
	go func() { defer close(done); _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close(); <-done })
	return ln.Addr().String()
}

const guardInit = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`

// guardPost sends an initialize without a session and returns the status
// and the session it opened.
func guardPost(t *testing.T, addr string) (int, string) {
	t.Helper()
	status, session, _ := mcpPost(t, "http://"+addr+"/mcp", guardKey, "", guardInit)
	return status, session
}

// mcpPost sends one JSON-RPC message to the MCP endpoint at url with key,
// in the MCP session sid ("" starts one), and returns the answer's status,
// the session it names and its body.
func mcpPost(t *testing.T, url, key, sid, msg string) (status int, session, body string) {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(msg))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Mcp-Session-Id"), string(b)
}

// TestMCPWrapHTTPSlowBody: a client with the key that declares a body and
// never sends it (slow loris) loses its connection once the body deadline
// passes; it does not hold it for ever. A body that arrives in time is
// served.
func TestMCPWrapHTTPSlowBody(t *testing.T) {
	addr := serveGuarded(t, time.Second)
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	_, err = fmt.Fprintf(c, "POST /mcp HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: %d\r\n\r\n%s",
		addr, guardKey, len(guardInit), guardInit[:10])
	require.NoError(t, err)
	start := time.Now()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(15*time.Second)))
	rest, err := io.ReadAll(c) // the server's answer, if any, then its close
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("a body that never arrives held the connection for %v (read %q)", time.Since(start).Round(time.Second), rest)
	}
	assert.Less(t, time.Since(start), 10*time.Second, "connection closed late")
	status, sid := guardPost(t, addr)
	assert.Equal(t, http.StatusOK, status)
	assert.NotEmpty(t, sid)
}

// TestMCPWrapHTTPSessionFlood: a client with the key that opens sessions
// and never ends them is refused (429) once it holds the maximum, even when
// the requests come at once; ending one with DELETE makes room. A
// request without the key opens nothing.
func TestMCPWrapHTTPSessionFlood(t *testing.T) {
	addr := serveGuarded(t, time.Minute)
	var opened atomic.Int64
	var wg sync.WaitGroup
	sids := make(chan string, 2*httpguard.MaxMCPSessions)
	start := make(chan struct{})
	for range 2 * httpguard.MaxMCPSessions {
		wg.Go(func() {
			<-start
			status, sid := guardPost(t, addr)
			switch status {
			case http.StatusOK:
				opened.Add(1)
				sids <- sid
			case http.StatusTooManyRequests:
			default:
				t.Errorf("initialize: status %d", status)
			}
		})
	}
	close(start)
	wg.Wait()
	close(sids)
	// Requests in flight count as sessions opening, so a flood at once may
	// be refused some short of the maximum, never past it.
	n := int(opened.Load())
	require.True(t, n > 0 && n <= httpguard.MaxMCPSessions, "sessions opened by a flood of %d: %d", 2*httpguard.MaxMCPSessions, n)
	// Filled one at a time, it holds exactly the maximum.
	var more []string
	for n < httpguard.MaxMCPSessions {
		status, sid := guardPost(t, addr)
		require.Equal(t, http.StatusOK, status, "session %d of %d", n+1, httpguard.MaxMCPSessions)
		more = append(more, sid)
		n++
	}
	status, _ := guardPost(t, addr)
	assert.Equal(t, http.StatusTooManyRequests, status, "a session past the maximum")

	// Raw, to read the refusal's text and its Retry-After.
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	fmt.Fprintf(c, "POST /mcp HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: %d\r\n\r\n%s", addr, guardKey, len(guardInit), guardInit)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, "5", resp.Header.Get("Retry-After"))
	assert.Contains(t, string(body), "the maximum is 256")

	req, _ := http.NewRequest("DELETE", "http://"+addr+"/mcp", nil)
	req.Header.Set("Authorization", "Bearer "+guardKey)
	req.Header.Set("Mcp-Session-Id", append(more, <-sids)[0])
	dr, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	dr.Body.Close()
	status, _ = guardPost(t, addr)
	assert.Equal(t, http.StatusOK, status, "after a DELETE")
}
