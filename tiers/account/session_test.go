package account

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/approve"
	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
	"github.com/airlock-sandbox/airlock/interp/starlark"
	"github.com/airlock-sandbox/airlock/server"
	"github.com/airlock-sandbox/airlock/tiers/process"
)

// executorOn serves an executor over inner on a peer-checked socket that
// admits this process's uid, as `airlock account serve` does, and
// returns the socket.
func executorOn(t testing.TB, inner airlock.Tier, storePath string) string {
	t.Helper()
	return executorFor(t, inner, storePath, Allow{UIDs: []uint32{uint32(os.Getuid())}})
}

// executorFor is executorOn serving the peers allow permits, on a
// socket whose directories any user may pass through.
func executorFor(t testing.TB, inner airlock.Tier, storePath string, allow Allow) string {
	t.Helper()
	if storePath == "" {
		storePath = filepath.Join(t.TempDir(), StoreFile)
	}
	ex := NewExecutor(inner, storePath, nil)
	noRules := []approve.Rule{}
	srv, err := server.New(server.Config{Approvals: &server.Approvals{Rules: &noRules},
		Tenants: []server.Tenant{{Name: "caller", KeySHA256: server.HashKey("k"), Situation: airlock.SituationCredentials}}},
		[]airlock.Tier{ex}, server.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "executor.sock")
	for _, d := range []string{filepath.Dir(sock), filepath.Dir(filepath.Dir(sock))} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	ln, err := Listen(sock, allow)
	if err != nil {
		t.Fatal(err)
	}
	h := ex.Front(srv.Handler())
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Set("Authorization", "Bearer k")
		h.ServeHTTP(w, r)
	}), ConnContext: func(ctx context.Context, c net.Conn) context.Context {
		if cred, err := PeerCred(c); err == nil {
			return WithPeer(ctx, "uid-"+strconv.Itoa(int(cred.Uid)))
		}
		return ctx
	}}
	go hs.Serve(ln)
	t.Cleanup(func() { srv.Shutdown(hs) })
	return sock
}

// TestSessionPassesThrough opens a session through the account tier, runs
// twice in it (the second run sees what the first left in the executor's
// inner session) and closes it; then the executor knows it no more. Once
// on the tier itself, once through a caller's server whose router sends
// situation credentials to the account tier.
func TestSessionPassesThrough(t *testing.T) {
	inner, err := starlark.New(starlark.NewConfig())
	if err != nil {
		t.Fatal(err)
	}
	sock := executorOn(t, inner, "")
	tier := New(NewConfig("test", sock, os.Getuid()))
	ctx := context.Background()
	job := func(code string) airlock.Job {
		return airlock.Job{Kind: airlock.KindStarlark, Code: code, Situation: airlock.SituationCredentials}
	}

	t.Run("tier", func(t *testing.T) {
		s, err := tier.OpenSession(ctx, airlock.SessionOptions{ID: "mine"})
		if err != nil {
			t.Fatal(err)
		}
		if s.ID() != "mine" {
			t.Errorf("ID = %q", s.ID())
		}
		if res, err := s.Run(ctx, job("n = 41\nresult = n")); err != nil || res.Value != float64(41) {
			t.Fatalf("first run: %v %+v", err, res)
		}
		res, err := s.Run(ctx, job("n = n + 1\nresult = n"))
		if err != nil || res.Value != float64(42) {
			t.Fatalf("second run: %v %+v", err, res)
		}
		if d := strings.Join(res.Decision, "\n"); !strings.Contains(d, "ran on starlark (session)") || !strings.Contains(d, "account test") {
			t.Errorf("decision: %s", d)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		// The executor's session is gone: a run in it is refused.
		if _, err := s.Run(ctx, job("result = n")); err == nil || !strings.Contains(err.Error(), "unknown session") {
			t.Errorf("run after close: %v", err)
		}
		// Outside a session, the state is not there.
		if _, err := tier.Run(ctx, job("result = n")); err == nil {
			t.Error("a plain run saw the session's state")
		}
	})

	t.Run("caller-server", func(t *testing.T) {
		srv, err := server.New(server.Config{Tenants: []server.Tenant{{Name: "t", KeySHA256: server.HashKey("ck"), Situation: airlock.SituationCredentials, Accounts: []string{"test"}}}},
			[]airlock.Tier{tier}, server.Options{})
		if err != nil {
			t.Fatal(err)
		}
		hs := httptest.NewServer(srv.Handler())
		defer func() { hs.Close(); srv.Close() }()
		call := func(method, path, body string) (int, map[string]any) {
			req, _ := http.NewRequest(method, hs.URL+path, strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer ck")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			data, _ := io.ReadAll(resp.Body)
			var out map[string]any
			json.Unmarshal(data, &out)
			return resp.StatusCode, out
		}
		code, open := call("POST", "/v1/sessions", `{"job": {"kind": "starlark", "code": "1", "situation": "credentials"}}`)
		if code != http.StatusCreated || open["tier"] != Name {
			t.Fatalf("open: %d %v", code, open)
		}
		id := open["id"].(string)
		for i, c := range []string{"xs = [1]\nresult = len(xs)", "xs.append(2)\nresult = len(xs)"} {
			body, _ := json.Marshal(job(c))
			code, res := call("POST", "/v1/sessions/"+id+"/run", string(body))
			if code != http.StatusOK || res["value"] != float64(i+1) || !strings.Contains(fmt.Sprint(res["decision"]), "account test: ran by its executor") {
				t.Fatalf("run %d: %d %v", i, code, res)
			}
		}
		if code, out := call("DELETE", "/v1/sessions/"+id, ""); code != http.StatusNoContent {
			t.Fatalf("close: %d %v", code, out)
		}
		// Nothing is left open on the executor.
		ex := &http.Client{Transport: &http.Transport{DialContext: tier.def.dial}}
		resp, err := ex.Get("http://account/v1/sessions")
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if got := string(bytes.TrimSpace(data)); got != "[]" {
			t.Errorf("the executor's sessions after close: %s", got)
		}
	})
}

// TestSessionRefusedByInner: an executor whose inner tier keeps no
// sessions says so, naming the account.
func TestSessionRefusedByInner(t *testing.T) {
	inner, err := starlark.New(starlark.NewConfig())
	if err != nil {
		t.Fatal(err)
	}
	sock := executorOn(t, noSessions{inner}, "")
	tier := New(NewConfig("test", sock, os.Getuid()))
	_, err = tier.OpenSession(context.Background(), airlock.SessionOptions{})
	if err == nil || !strings.Contains(err.Error(), "executor of account test") || !strings.Contains(err.Error(), "keeps no sessions") {
		t.Fatalf("err = %v", err)
	}
}

// noSessions is a tier without its sessions (the microVM's case).
type noSessions struct{ airlock.Tier }

// TestSessionCredentials runs command jobs with a credential in a session
// of an executor over the process tier's seccomp sandbox: a value one run
// resolved and left in the session's scratch is scrubbed from a later
// run that names no credential; a credential limited to other callers is
// refused; a static credential's decision says it is long-lived.
func TestSessionCredentials(t *testing.T) {
	inner := processInner(t)
	store := filepath.Join(t.TempDir(), StoreFile)
	const value = "ghs_session-Zq9x-canary"
	if err := AddStatic(store, "gh", value, os.Getuid(), os.Getgid()); err != nil {
		t.Fatal(err)
	}
	sock := executorOn(t, inner, store)
	tier := New(NewConfig("test", sock, os.Getuid()))
	ctx := context.Background()
	sh := func(script string, creds ...airlock.Credential) airlock.Job {
		return airlock.Job{Kind: airlock.KindCommand, Argv: []string{"/bin/sh", "-c", script}, Situation: airlock.SituationCredentials,
			Grants: airlock.Grants{Spawn: true, Credentials: creds}}
	}
	s, err := tier.OpenSession(ctx, airlock.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res, err := s.Run(ctx, sh(`printf %s "$T" > kept; echo "$T"`, airlock.Credential{Env: "T", Ref: "gh"}))
	if err != nil || res.ExitCode != 0 || strings.TrimSpace(res.Stdout) != Redacted {
		t.Fatalf("first run: %v %+v", err, res)
	}
	if d := strings.Join(res.Decision, "\n"); !strings.Contains(d, "T=gh (static: long-lived") {
		t.Errorf("decision: %s", d)
	}
	res, err = s.Run(ctx, sh(`cat kept; echo; od -An -tx1 kept | tr -d ' \n'`))
	if err != nil || res.ExitCode != 0 || strings.Contains(res.Stdout, value) || strings.Contains(res.Stdout, fmt.Sprintf("%x", value)) ||
		!strings.Contains(res.Stdout, Redacted) {
		t.Fatalf("second run, no credential of its own: %v %+v", err, res)
	}

	// Limited to another caller: refused, nothing resolved.
	if err := SetCallers(store, "gh", []string{"uid-4242424"}, os.Getuid(), os.Getgid()); err != nil {
		t.Fatal(err)
	}
	_, err = tier.Run(ctx, sh(`echo "$T"`, airlock.Credential{Env: "T", Ref: "gh"}))
	want := fmt.Sprintf(`credential "gh" may not be used by uid-%d (only by uid-4242424)`, os.Getuid())
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("err = %v, want %q", err, want)
	}
	if err := SetCallers(store, "gh", []string{"uid-4242424", fmt.Sprintf("uid-%d", os.Getuid())}, os.Getuid(), os.Getgid()); err != nil {
		t.Fatal(err)
	}
	if res, err := tier.Run(ctx, sh(`test -n "$T" && echo ok`, airlock.Credential{Env: "T", Ref: "gh"})); err != nil || res.Stdout != "ok\n" {
		t.Errorf("a listed caller: %v %+v", err, res)
	}
}

// processInner is the process tier's seccomp sandbox, as an executor's
// inner tier for command jobs; the test is skipped where it cannot run.
func processInner(t *testing.T) airlock.Tier {
	t.Helper()
	inner, err := process.NewFilter(process.NewConfig())
	if err != nil {
		testenv.Skipf(t, "the process tier: %v", err)
	}
	if err := inner.Available(); err != nil {
		inner.Close()
		testenv.Skipf(t, "the process tier: %v", err)
	}
	return inner
}

// TestCollectedNamesScrubbed: a job that names a file it leaves out of
// the collected files (a link, a directory) after a credential does not
// get the value back in the lines that say what was left out.
func TestCollectedNamesScrubbed(t *testing.T) {
	inner := processInner(t)
	store := filepath.Join(t.TempDir(), StoreFile)
	const value = "ghs_skipped-Wq7v-canary"
	if err := AddStatic(store, "gh", value, os.Getuid(), os.Getgid()); err != nil {
		t.Fatal(err)
	}
	tier := New(NewConfig("test", executorOn(t, inner, store), os.Getuid()))
	job := airlock.Job{Kind: airlock.KindCommand, Argv: []string{"/bin/sh", "-c", `ln -s nowhere "l$T"; mkdir "d$T"; echo x > "f$T"`},
		Situation: airlock.SituationCredentials, Collect: []string{"*"},
		Grants: airlock.Grants{Spawn: true, Credentials: []airlock.Credential{{Env: "T", Ref: "gh"}}}}
	res, err := tier.Run(context.Background(), job)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%v %+v", err, res)
	}
	all, _ := json.Marshal(res)
	if strings.Contains(string(all), value) {
		t.Errorf("the value came back: files %v, skipped %q", res.Files, res.FilesSkipped)
	}
	if len(res.FilesSkipped) < 2 || len(res.Files) != 1 {
		t.Errorf("files %v, skipped %q: want one file and two skipped", res.Files, res.FilesSkipped)
	}
}

// TestSessionsAreTheCallers: a session on the executor is the caller's
// that opened it. Another caller the executor serves (here uid 65534 on
// the same socket) neither sees it listed nor runs in it, so it cannot
// read what the session's runs left there, such as a credential limited
// to the first caller, nor close it.
func TestSessionsAreTheCallers(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skipf(t, "a second caller runs as uid 65534, which needs root")
	}
	curl, err := exec.LookPath("curl")
	if err != nil {
		testenv.Skipf(t, "the second caller is curl: %v", err)
	}
	inner := processInner(t)
	store := filepath.Join(t.TempDir(), StoreFile)
	const value = "ghs_mine-Hk4p-canary"
	if err := AddStatic(store, "gh", value, os.Getuid(), os.Getgid()); err != nil {
		t.Fatal(err)
	}
	me := fmt.Sprintf("uid-%d", os.Getuid())
	if err := SetCallers(store, "gh", []string{me}, os.Getuid(), os.Getgid()); err != nil {
		t.Fatal(err)
	}
	sock := executorFor(t, inner, store, Allow{UIDs: []uint32{uint32(os.Getuid()), 65534}})
	tier := New(NewConfig("test", sock, os.Getuid()))
	ctx := context.Background()
	s, err := tier.OpenSession(ctx, airlock.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	job := airlock.Job{Kind: airlock.KindCommand, Argv: []string{"/bin/sh", "-c", `printf %s "$T" > kept`}, Situation: airlock.SituationCredentials,
		Grants: airlock.Grants{Spawn: true, Credentials: []airlock.Credential{{Env: "T", Ref: "gh"}}}}
	if res, err := s.Run(ctx, job); err != nil || res.ExitCode != 0 {
		t.Fatalf("the owner's run: %v %+v", err, res)
	}
	remote := s.(*session).remote

	other := func(method, path, body string) string {
		t.Helper()
		args := []string{"-sS", "--max-time", "30", "--unix-socket", sock, "-X", method, "http://account" + path}
		if body != "" {
			args = append(args, "-H", "Content-Type: application/json", "--data-binary", body)
		}
		c := exec.Command(curl, args...)
		c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("curl as uid 65534: %v: %s", err, out)
		}
		return string(out)
	}
	if out := other("GET", "/v1/sessions", ""); strings.Contains(out, remote) {
		t.Errorf("another caller lists the session: %s", out)
	}
	steal, _ := json.Marshal(airlock.Job{Kind: airlock.KindCommand, Argv: []string{"/bin/sh", "-c", "rev kept"}, Situation: airlock.SituationCredentials,
		Grants: airlock.Grants{Spawn: true}})
	reversed := []rune(value)
	slices.Reverse(reversed)
	out := other("POST", "/v1/sessions/"+remote+"/run", string(steal))
	if strings.Contains(out, string(reversed)) || !strings.Contains(out, "unknown session") {
		t.Errorf("another caller ran in the session: %s", out)
	}
	if out := other("DELETE", "/v1/sessions/"+remote, ""); !strings.Contains(out, "unknown session") {
		t.Errorf("another caller closed the session: %s", out)
	}
	// Nor does it read the executor's audit trail of the owner's jobs.
	if out := other("GET", "/v1/audit", ""); strings.Contains(out, "kept") || !strings.Contains(out, "not served") {
		t.Errorf("another caller read the audit trail: %s", out)
	}
	// The owner's session is still there, and still its own.
	if res, err := s.Run(ctx, airlock.Job{Kind: airlock.KindCommand, Argv: []string{"/bin/sh", "-c", "wc -c < kept"},
		Situation: airlock.SituationCredentials, Grants: airlock.Grants{Spawn: true}}); err != nil || strings.TrimSpace(res.Stdout) != strconv.Itoa(len(value)) {
		t.Errorf("the owner's later run: %v %+v", err, res)
	}
	// One caller holds at most MaxSessionsPerCaller sessions; the quota
	// the callers share is left for the others.
	for range MaxSessionsPerCaller - 1 {
		more, err := tier.OpenSession(ctx, airlock.SessionOptions{})
		if err != nil {
			t.Fatalf("opening a session within the caller's bound: %v", err)
		}
		defer more.Close()
	}
	if extra, err := tier.OpenSession(ctx, airlock.SessionOptions{}); err == nil {
		extra.Close()
		t.Errorf("a caller opened more than %d sessions", MaxSessionsPerCaller)
	} else if !strings.Contains(err.Error(), "close one first") {
		t.Errorf("the session past the bound: %v", err)
	}
	if out := other("POST", "/v1/sessions", `{"tier":"`+ExecutorName+`"}`); !strings.Contains(out, `"id"`) {
		t.Errorf("another caller could not open a session once the first held its most: %s", out)
	} else {
		var opened struct{ ID string }
		_ = json.Unmarshal([]byte(out), &opened)
		other("DELETE", "/v1/sessions/"+opened.ID, "")
	}
}

// TestStreamedOutputScrubbed: a caller that asks the executor itself for
// its output as it runs (ndjson or server-sent events, which the account
// tier never does) gets no credential value: the output is not streamed
// past the scrubber, it comes in the scrubbed Result.
func TestStreamedOutputScrubbed(t *testing.T) {
	inner := processInner(t)
	store := filepath.Join(t.TempDir(), StoreFile)
	const value = "ghs_streamed-Xr5m-canary"
	if err := AddStatic(store, "gh", value, os.Getuid(), os.Getgid()); err != nil {
		t.Fatal(err)
	}
	sock := executorOn(t, inner, store)
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	job, _ := json.Marshal(airlock.Job{Kind: airlock.KindCommand, Argv: []string{"/bin/sh", "-c", `echo "$T"; echo "$T" >&2`},
		Situation: airlock.SituationCredentials, Grants: airlock.Grants{Spawn: true, Credentials: []airlock.Credential{{Env: "T", Ref: "gh"}}}})
	for _, accept := range []string{"application/x-ndjson", "text/event-stream"} {
		req, _ := http.NewRequest(http.MethodPost, "http://account/v1/run", bytes.NewReader(job))
		req.Header.Set("Accept", accept)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(body), value) || !strings.Contains(string(body), "redacted") {
			t.Errorf("%s: %d %s", accept, resp.StatusCode, body)
		}
	}
}

// TestCredentialBounds: a job names at most MaxCredentials
// credentials, and one session's runs resolve at most MaxSessionValues
// distinct values (every run in it is scrubbed of them all): a run that
// would add more is refused, and the session's other runs go on.
func TestCredentialBounds(t *testing.T) {
	inner := processInner(t)
	st := store{Credentials: map[string]storedCredential{}}
	for i := range MaxSessionValues + 1 {
		st.Credentials[fmt.Sprintf("c%d", i)] = storedCredential{Value: fmt.Sprintf("value-%04d-canary", i)}
	}
	data, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), StoreFile)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	tier := New(NewConfig("test", executorOn(t, inner, path), os.Getuid()))
	ctx := context.Background()
	job := func(from, n int) airlock.Job {
		j := airlock.Job{Kind: airlock.KindCommand, Argv: []string{"/bin/true"}, Situation: airlock.SituationCredentials}
		for i := from; i < from+n; i++ {
			j.Grants.Credentials = append(j.Grants.Credentials, airlock.Credential{Env: fmt.Sprintf("C%d", i-from), Ref: fmt.Sprintf("c%d", i)})
		}
		return j
	}
	over := job(0, MaxCredentials+1)
	if err := over.Validate(); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("above the %d a job may name", MaxCredentials)) {
		t.Errorf("a job naming %d credentials: %v", MaxCredentials+1, err)
	}
	if _, err := tier.Run(ctx, over); err == nil {
		t.Errorf("a job naming %d credentials ran", MaxCredentials+1)
	}

	s, err := tier.OpenSession(ctx, airlock.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	per := MaxCredentials
	for from := 0; from < MaxSessionValues; from += per {
		if res, err := s.Run(ctx, job(from, min(per, MaxSessionValues-from))); err != nil || res.ExitCode != 0 {
			t.Fatalf("run from c%d: %v %+v", from, err, res)
		}
	}
	_, err = s.Run(ctx, job(MaxSessionValues, 1))
	if err == nil || !strings.Contains(err.Error(), "open a new session") {
		t.Errorf("a run past the session's %d values: %v", MaxSessionValues, err)
	}
	// Values the session holds, and none: the session goes on.
	for _, j := range []airlock.Job{job(0, 1), job(0, 0)} {
		if res, err := s.Run(ctx, j); err != nil || res.ExitCode != 0 {
			t.Errorf("a run within the session's values: %v %+v", err, res)
		}
	}
}

// TestSessionBoundConcurrent: one caller opening sessions all at once
// still holds at most MaxSessionsPerCaller of them, so the executor's
// quota, which its callers share, is left for the others.
func TestSessionBoundConcurrent(t *testing.T) {
	tier := New(NewConfig("test", executorOn(t, processInner(t), ""), os.Getuid()))
	const n = 16 // the executor's quota
	for round := range 20 {
		opened := make(chan airlock.Session, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				if s, err := tier.OpenSession(context.Background(), airlock.SessionOptions{}); err == nil {
					opened <- s
				}
			}()
		}
		close(start)
		wg.Wait()
		close(opened)
		held := 0
		for s := range opened {
			held++
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		}
		if held > MaxSessionsPerCaller {
			t.Fatalf("round %d: one caller opened %d sessions at once, more than %d", round, held, MaxSessionsPerCaller)
		}
	}
}

// TestExecutorGrantsNoHostPath: the executor's user can read the
// account's store, but a job cannot have it (or any host path) granted:
// the executor's server grants its callers none, and the caller is told
// why in one line.
func TestExecutorGrantsNoHostPath(t *testing.T) {
	store := filepath.Join(t.TempDir(), StoreFile)
	const value = "ghs_hostpath-Wq3z-canary"
	if err := AddStatic(store, "gh", value, os.Getuid(), os.Getgid()); err != nil {
		t.Fatal(err)
	}
	tier := New(NewConfig("test", executorOn(t, processInner(t), store), os.Getuid()))
	res, err := tier.Run(context.Background(), airlock.Job{Kind: airlock.KindCommand, Argv: []string{"/bin/cat", store},
		Situation: airlock.SituationCredentials, Grants: airlock.Grants{FS: airlock.FSGrant{Read: []string{filepath.Dir(store)}}}})
	stop, ok := airlock.AsStop(err)
	if !ok || stop.Reason != airlock.StopDenied || !strings.Contains(stop.Detail, "executor of account test: ") ||
		!strings.Contains(stop.Detail, "no host path may be granted") {
		t.Errorf("a read grant of the store's directory: %v", err)
	}
	if strings.Contains(res.Stdout+res.Stderr, value) {
		t.Errorf("the store was read: %+v", res)
	}
}
