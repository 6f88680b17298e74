package account

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
)

func TestScrub(t *testing.T) {
	const v = "ghp_S3cr3tV4lue-xyz"
	sc := newScrubber([]string{v})
	var forms []string
	forms = append(forms, v, hex.EncodeToString([]byte(v)), strings.ToUpper(hex.EncodeToString([]byte(v))))
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding} {
		for _, pre := range []string{"", "a", "ab", "abc"} {
			for _, post := range []string{"", "\n", "zz"} {
				forms = append(forms, enc.EncodeToString([]byte(pre+v+post)))
			}
		}
	}
	for _, f := range forms {
		out := sc.text("before " + f + " after")
		if strings.Contains(out, v) || !strings.Contains(out, Redacted) {
			t.Errorf("%q scrubbed to %q", f, out)
		}
		// Whatever is left of an encoded form is its first and last
		// groups: at most two of the value's bytes at each end, beside the
		// prefix and suffix (up to three bytes, four characters, each).
		left := strings.TrimSuffix(strings.TrimPrefix(out, "before "), " after")
		if len(strings.Trim(strings.ReplaceAll(left, Redacted, ""), "=")) > 8 {
			t.Errorf("%q: %q left", f, left)
		}
	}
	// Output cut inside a value.
	if out := sc.text("token: " + v[:10]); strings.Contains(out, v[:10]) {
		t.Errorf("a cut value survived: %q", out)
	}
	if out := sc.text("nothing here"); out != "nothing here" {
		t.Errorf("plain text changed: %q", out)
	}
	res := airlock.Result{Stdout: v, Stderr: hex.EncodeToString([]byte(v)), Value: map[string]any{"k": []any{v}},
		Files: map[string]string{"f": v}, Error: &airlock.ErrorInfo{Kind: airlock.ErrRuntime, Message: "x " + v}}
	sc.result(&res)
	if s := strings.Join([]string{res.Stdout, res.Stderr, res.Files["f"], res.Error.Message, res.Value.(map[string]any)["k"].([]any)[0].(string)}, "|"); strings.Contains(s, v) || strings.Contains(s, hex.EncodeToString([]byte(v))) {
		t.Errorf("result kept the value: %s", s)
	}
	// Two collected files whose names are one once scrubbed: one is kept,
	// the other said to be left out, not lost silently.
	res = airlock.Result{Files: map[string]string{"a" + v: "1", "a" + hex.EncodeToString([]byte(v)): "2"}}
	sc.result(&res)
	if len(res.Files) != 1 || len(res.FilesSkipped) != 1 || !strings.Contains(res.FilesSkipped[0], "a"+Redacted+": another collected file has this name") {
		t.Errorf("files %q, skipped %q: want one file and the other named as left out", res.Files, res.FilesSkipped)
	}
}

func TestStoreRefusesLooseMode(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, StoreFile)
	if err := AddStatic(path, "gh", "0123456789abcdef", os.Getuid(), os.Getgid()); err != nil {
		t.Fatal(err)
	}
	s, err := loadStore(path)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := s.resolve("gh"); err != nil || v != "0123456789abcdef" {
		t.Fatalf("resolve = %q, %v", v, err)
	}
	if _, err := s.resolve("other"); err == nil {
		t.Error("an unknown reference resolved")
	}
	for _, mode := range []os.FileMode{0o640, 0o604, 0o660} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		if _, err := loadStore(path); err == nil || !strings.Contains(err.Error(), "chmod 600") {
			t.Errorf("mode %04o: err = %v, want a refusal", mode, err)
		}
	}
	os.Chmod(path, 0o600)
	link := filepath.Join(dir, "link.json")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	if _, err := loadStore(link); err == nil {
		t.Error("a store behind a symbolic link was read")
	}
	if err := AddStatic(path, "short", "1234567", os.Getuid(), os.Getgid()); err == nil {
		t.Error("a value too short to scrub was stored")
	}
}

// TestPeerRefused: a peer whose uid and gid the executor does not allow
// is answered 403 with the reason, and never reaches the handler; the
// client tier refuses an executor served by another uid than the
// account's.
func TestPeerRefused(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "x.sock")
	other := uint32(os.Getuid() + 4242)
	ln, err := Listen(sock, Allow{UIDs: []uint32{other}, GIDs: []uint32{other}})
	if err != nil {
		t.Fatal(err)
	}
	reached := make(chan struct{}, 1)
	hs := &http.Server{Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached <- struct{}{} })}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })

	job := airlock.Job{Kind: airlock.KindCommand, Argv: []string{"true"}, Situation: airlock.SituationCredentials}
	tier := New(NewConfig("test", sock, -1))
	_, err = tier.Run(context.Background(), job)
	var na *airlock.NotAdmitted
	if !errors.As(err, &na) || !strings.Contains(err.Error(), "is not allowed by this executor") {
		t.Fatalf("err = %v, want a peer refusal", err)
	}
	select {
	case <-reached:
		t.Fatal("a refused peer reached the server")
	default:
	}

	// The executor is checked too: this socket is ours, not uid other's.
	tier = New(NewConfig("test", sock, int(other)))
	if _, err = tier.Run(context.Background(), job); err == nil || !strings.Contains(err.Error(), "not by account test") {
		t.Fatalf("err = %v, want the executor's uid refused", err)
	}
}

func TestAdmit(t *testing.T) {
	tier := New(NewConfig("test", "/nonexistent", -1))
	job := airlock.Job{Kind: airlock.KindCommand, Argv: []string{"env"}, Grants: airlock.Grants{Secrets: map[string]string{"A": "v"}}}
	if err := tier.Admit(job); err == nil || !strings.Contains(err.Error(), "grants.credentials") {
		t.Errorf("secrets at level 5: %v", err)
	}
	if err := tier.Available(); err == nil || !strings.Contains(err.Error(), "airlock account start test") {
		t.Errorf("Available with no executor: %v", err)
	}
	t.Setenv("AIRLOCK_ACCOUNTS", t.TempDir())
	t.Setenv("AIRLOCK_ACCOUNT", "")
	if err := FromRegistered(Dir(), "").Available(); err == nil || !strings.Contains(err.Error(), "airlock account add NAME") {
		t.Errorf("no account: %v", err)
	}
}

// TestPeerRefusalsBounded: a peer the executor does not serve, opening
// connection after connection and sending nothing, holds at most a
// bounded number of the executor's goroutines and descriptors; past it,
// its connections are closed at once.
func TestPeerRefusalsBounded(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "x.sock")
	other := uint32(os.Getuid() + 4242)
	ln, err := Listen(sock, Allow{UIDs: []uint32{other}, GIDs: []uint32{other}})
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: http.NotFoundHandler()}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	before := runtime.NumGoroutine()
	const n = 400
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range n {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	// A refusal waits up to 2 s for the request: look within the first.
	most := 0
	for range 20 {
		time.Sleep(25 * time.Millisecond)
		most = max(most, runtime.NumGoroutine()-before)
	}
	if most > 2*maxRefusing {
		t.Errorf("%d silent refused connections held %d more goroutines, want at most %d", n, most, 2*maxRefusing)
	}
	// Past the bound, a connection is closed: its read ends at once.
	last := conns[n-1]
	last.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := io.Copy(io.Discard, last); err != nil {
		t.Errorf("the last connection: %v, want it closed", err)
	}
}

// TestRemoteConnectionsBounded: the mutual-TLS port holds at most its
// bound of connections; one past it is closed at once, and a slot freed
// by a closed connection serves the next.
func TestRemoteConnectionsBounded(t *testing.T) {
	tln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	const bound = 4
	ln := LimitConns(tln, bound)
	defer ln.Close()
	held := make(chan net.Conn, 2*bound)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held <- c // kept open, as a handshake that never comes
		}
	}()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", tln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// closed waits up to d for the server's close: long where a close is
	// expected, short where none may come.
	closed := func(c net.Conn, d time.Duration) bool {
		c.SetReadDeadline(time.Now().Add(d))
		_, err := c.Read(make([]byte, 1))
		return err == io.EOF || errors.Is(err, syscall.ECONNRESET)
	}
	var open, served []net.Conn
	for range bound {
		open = append(open, dial())
		served = append(served, <-held)
	}
	defer func() {
		for _, c := range served {
			c.Close()
		}
	}()
	if c := dial(); !closed(c, 10*time.Second) {
		t.Fatalf("a connection past the bound of %d stayed open", bound)
	}
	for _, c := range open {
		if closed(c, 100*time.Millisecond) {
			t.Fatal("a connection within the bound was closed")
		}
	}
	// Closed by the server, a connection frees its slot for the next.
	served[0].Close()
	served[0].Close() // a second close frees nothing more
	if c := dial(); closed(c, 100*time.Millisecond) {
		t.Fatal("a connection after a slot was freed was closed")
	}
	served = append(served, <-held)
	if c := dial(); !closed(c, 10*time.Second) {
		t.Fatalf("a connection past the bound of %d stayed open after the freed slot was taken", bound)
	}
}
