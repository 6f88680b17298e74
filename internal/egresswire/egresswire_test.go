package egresswire

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/egress"
)

// TestStart: the socket and CA are placed in the directory, the
// environment names the CA as the sandbox sees it, a request on the
// socket is decided and its decision kept and passed on, and Close
// removes the socket.
func TestStart(t *testing.T) {
	dir := t.TempDir()
	var passed []egress.Record
	g, env, err := Start(context.Background(), egress.Config{Job: "j1", Rules: []airlock.NetRule{{Host: "allowed.test"}},
		Log: func(r egress.Record) { passed = append(passed, r) }}, dir, "/inside")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(env, "SSL_CERT_FILE=/inside/ca.pem") || !slices.Contains(env, "HTTP_PROXY=http://"+egress.SandboxProxyAddr) {
		t.Errorf("environment: %v", env)
	}
	if pem, err := os.ReadFile(filepath.Join(dir, CA)); err != nil || !strings.Contains(string(pem), "BEGIN CERTIFICATE") {
		t.Errorf("CA not placed: %v", err)
	}
	c, err := net.Dial("unix", filepath.Join(dir, Socket))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = c.Write([]byte{egress.StreamHTTP})
	_, _ = c.Write([]byte("GET http://evil.test/x HTTP/1.1\r\nHost: evil.test\r\nConnection: close\r\n\r\n"))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	c.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("evil.test: %d, want 403", resp.StatusCode)
	}
	lines := g.Close()
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "egress deny http GET evil.test:80/x: ") || len(passed) != 1 {
		t.Errorf("decisions %q, passed on %d", lines, len(passed))
	}
	if _, err := os.Stat(filepath.Join(dir, Socket)); !os.IsNotExist(err) {
		t.Errorf("socket left behind: %v", err)
	}
}

// TestDecisionsBounded: a job cannot grow its Result's decisions (held in
// the host's memory, then written to the result and the audit) without
// bound by sending request after request, or long paths: the first and
// the last MaxDecisions/2 are kept, each cut to maxDecisionLine bytes,
// with a line between counting the rest.
func TestDecisionsBounded(t *testing.T) {
	dir := t.TempDir()
	var passed int
	g, _, err := Start(context.Background(), egress.Config{Job: "j1", Rules: []airlock.NetRule{{Host: "allowed.test"}},
		Log: func(egress.Record) { passed++ }}, dir, "/inside")
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("d", 4000)
	const sent = MaxDecisions + 20
	for i := 0; i < sent; i++ {
		getVia(t, dir, fmt.Sprintf("http://evil.test/%d/%s", i, long))
	}
	lines := g.Close()
	if len(lines) != MaxDecisions+1 || !strings.Contains(lines[MaxDecisions/2], "20 more") {
		t.Fatalf("%d decisions kept; want %d, a count of the 20 not kept in the middle", len(lines), MaxDecisions+1)
	}
	for i, want := range map[int]int{0: 0, MaxDecisions/2 - 1: MaxDecisions/2 - 1, MaxDecisions/2 + 1: MaxDecisions/2 + 20, MaxDecisions: sent - 1} {
		if !strings.HasPrefix(lines[i], fmt.Sprintf("egress deny http GET evil.test:80/%d/ddd", want)) {
			t.Errorf("decision %d: %.60q, want request %d's", i, lines[i], want)
		}
	}
	for _, l := range lines {
		if len(l) > maxDecisionLine {
			t.Fatalf("a decision of %d bytes kept, want at most %d", len(l), maxDecisionLine)
		}
	}
	if passed != sent {
		t.Errorf("%d decisions passed on to the operator's log, want all %d", passed, sent)
	}
}

// TestLoggedRefusalsBounded: a job refusing itself in a loop writes at
// most MaxLoggedRefusals records to the operator's log, then one that
// counts the rest.
func TestLoggedRefusalsBounded(t *testing.T) {
	dir := t.TempDir()
	var got []egress.Record
	g, _, err := Start(context.Background(), egress.Config{Job: "j1", Rules: []airlock.NetRule{{Host: "allowed.test"}},
		Log: func(r egress.Record) { got = append(got, r) }}, dir, "/inside")
	if err != nil {
		t.Fatal(err)
	}
	const sent = MaxLoggedRefusals + 30
	for i := 0; i < sent; i++ {
		getVia(t, dir, fmt.Sprintf("http://evil.test/%d", i))
	}
	g.Close()
	g.Close() // the count is written once
	if len(got) != MaxLoggedRefusals+1 {
		t.Fatalf("%d records in the operator's log, want %d and a count", len(got), MaxLoggedRefusals)
	}
	last := got[len(got)-1]
	if last.Job != "j1" || last.Verdict != egress.Deny || !strings.Contains(last.Reason, "30 more refusals of this job not logged") {
		t.Errorf("the last record: %+v", last)
	}
}

// getVia sends GET url through the gateway's socket in dir, as a
// sandbox's forwarder would, and reads the answer.
func getVia(t *testing.T, dir, url string) {
	t.Helper()
	c, err := net.Dial("unix", filepath.Join(dir, Socket))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = c.Write([]byte{egress.StreamHTTP})
	_, _ = fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: evil.test\r\n\r\n", url)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

// The CA is placed as a file of its own: a link left at its name (by
// whoever could write the directory) is replaced, not written through.
func TestStartReplacesLinkAtCA(t *testing.T) {
	dir, elsewhere := t.TempDir(), filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(elsewhere, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, filepath.Join(dir, CA)); err != nil {
		t.Fatal(err)
	}
	g, _, err := Start(context.Background(), egress.Config{Job: "j1"}, dir, "/inside")
	if err != nil {
		t.Fatal(err)
	}
	g.Close()
	if b, _ := os.ReadFile(elsewhere); string(b) != "keep" {
		t.Errorf("the link's target was written: %q", b)
	}
	st, err := os.Lstat(filepath.Join(dir, CA))
	if err != nil || !st.Mode().IsRegular() || st.Mode().Perm() != 0o644 {
		t.Errorf("CA: %v, %v", st, err)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, ".ca-*")); len(m) != 0 {
		t.Errorf("left behind: %v", m)
	}
}
