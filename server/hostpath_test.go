package server_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/approve"
	"github.com/airlock-sandbox/airlock/internal/testing/tiertest"
	"github.com/airlock-sandbox/airlock/server"
)

// readJob is an internal command job that reads path, granted.
func readJob(path string) string { return readJobAs(path, path) }

// readJobAs is an internal command job that reads path, granting grant.
func readJobAs(path, grant string) string {
	b, _ := json.Marshal(airlock.Job{Kind: airlock.KindCommand, Situation: airlock.SituationInternal,
		Argv: []string{"cat", path}, Grants: airlock.Grants{FS: airlock.FSGrant{Read: []string{grant}}}})
	return string(b)
}

func expectDenied(t *testing.T, r reply, want string) {
	t.Helper()
	var res airlock.Result
	_ = json.Unmarshal(r.body, &res)
	if r.status != 403 || res.Stopped == nil || res.Stopped.Reason != airlock.StopDenied || !strings.Contains(res.Stopped.Detail, want) {
		t.Errorf("status %d %s; want 403 stopped: denied mentioning %q", r.status, r.body, want)
	}
}

// A tenant may grant only host paths under its read roots, resolved to
// what they name, and never what the server keeps for itself.
func TestReadRoots(t *testing.T) {
	root := t.TempDir()
	if err := os.Chmod(root, 0o755); err != nil { // the sandbox's user reads it
		t.Fatal(err)
	}
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret")
	ok := filepath.Join(root, "ok.txt")
	keyDir := filepath.Join(root, "keys")
	key := filepath.Join(keyDir, "approval.key")
	for p, data := range map[string]string{secret: "host secret\n", ok: "granted\n", key: strings.Repeat("k", 32)} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(ok, 0o644); err != nil {
	}
	if err := os.Symlink(secret, filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, func(c *server.Config) {
		c.Tenants[0].ReadRoots = []string{root}
		c.Approvals.KeyFile = key
	})
	// Tenant b has no roots: no host path at all.
	expectDenied(t, f.do("POST", "/v1/run", keyB, readJob(ok)), "no read roots")
	// Outside the roots, by name or through a link under a root.
	expectDenied(t, f.do("POST", "/v1/run", keyA, readJob("/etc/passwd")), "outside the read roots ["+root+"]")
	expectDenied(t, f.do("POST", "/v1/run", keyA, readJob(filepath.Join(root, "link"))), secret+" (named "+filepath.Join(root, "link")+")")
	// The server's own key under a root, and a directory holding it.
	expectDenied(t, f.do("POST", "/v1/run", keyA, readJob(key)), "the server keeps")
	expectDenied(t, f.do("POST", "/v1/run", keyA, readJob(keyDir)), "the server keeps")
	expectDenied(t, f.do("POST", "/v1/run", keyA, readJob(root)), "the server keeps")
	// The refusals are audited.
	if n := strings.Count(strings.Join(f.audit.Lines(), "\n"), `"outcome":"refused_denied"`); n != 6 {
		t.Errorf("%d refusals audited as denied, want 6", n)
	}
	// A grant under a root runs (benign control).
	if err := f.srv.Router().Unavailable("process"); err != nil {
		tiertest.Unavailable(t, "process", err)
	}
	r := f.do("POST", "/v1/run", keyA, readJob(ok))
	if res := r.result(t); r.status != 200 || res.Stdout != "granted\n" {
		t.Fatalf("read under a root: %d %s", r.status, r.body)
	}
}

// An approval binds what a read grant names, not its name: a link
// retargeted, or a small file edited, after the approval is stale.
func TestApprovalBindsReadTargets(t *testing.T) {
	root := t.TempDir()
	if err := os.Chmod(root, 0o755); err != nil { // the sandbox's user reads it
		t.Fatal(err)
	}
	for name, data := range map[string]string{"a.txt": "approved\n", "b.txt": "other\n"} {
		if err := os.WriteFile(filepath.Join(root, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(root, "data")
	if err := os.Symlink("a.txt", link); err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, func(c *server.Config) {
		c.Tenants[0].ReadRoots = []string{root}
		rules := append(*c.Approvals.Rules, approve.Rule{Name: "reads", FSRead: new(true)})
		c.Approvals.Rules = &rules
	})
	if err := f.srv.Router().Unavailable("process"); err != nil {
		tiertest.Unavailable(t, "process", err)
	}
	// The sandbox sees the real path, which the program reads.
	job := readJobAs(filepath.Join(root, "a.txt"), link)
	var req approvalReply
	f.do("POST", "/v1/approvals", keyA, job).decode(t, &req)
	var shown struct{ Job airlock.Job }
	f.do("GET", "/v1/approvals/"+req.Digest, keyApprover, nil).decode(t, &shown)
	// The approver sees the real path, not the link's name.
	if got := shown.Job.Grants.FS.Read; len(got) != 1 || got[0] != filepath.Join(root, "a.txt") {
		t.Fatalf("approver sees read grants %q, want the link's target", got)
	}
	tok := f.approveAny(t, keyA, job)
	if r := f.do("POST", "/v1/run", keyA, job, server.ApprovalHeader, tok.Token); r.status != 200 || r.result(t).Stdout != "approved\n" {
		t.Fatalf("approved read: %d %s", r.status, r.body)
	}
	// The link now points elsewhere under the same root.
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("b.txt", link); err != nil {
		t.Fatal(err)
	}
	expectStale(t, f.do("POST", "/v1/run", keyA, job, server.ApprovalHeader, tok.Token), "differs")
	// The approved file itself, edited in place.
	direct := readJob(filepath.Join(root, "a.txt"))
	tok = f.approveAny(t, keyA, direct)
	if err := os.WriteFile(filepath.Join(root, "a.txt"), []byte("edited\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	expectStale(t, f.do("POST", "/v1/run", keyA, direct, server.ApprovalHeader, tok.Token), "differs")
}

// The server refuses to start with a key file others may read.
func TestKeyFileMode(t *testing.T) {
	key := filepath.Join(t.TempDir(), "approval.key")
	if err := os.WriteFile(key, []byte(strings.Repeat("k", 32)), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.Approvals.KeyFile = key
	if _, err := newServer(cfg, server.Options{}); err == nil || !strings.Contains(err.Error(), "mode 0644") || !strings.Contains(err.Error(), key) {
		t.Fatalf("key file mode 0644: %v; want a refusal naming the file and the mode", err)
	}
	if err := os.Chmod(key, 0o600); err != nil {
		t.Fatal(err)
	}
	srv, err := newServer(cfg, server.Options{})
	if err != nil {
		t.Fatalf("key file mode 0600: %v", err)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
}

// approveAny requests an approval for job and has the approver grant it.
func (f *fixture) approveAny(t *testing.T, key, job string) approvalReply {
	t.Helper()
	var req, tok approvalReply
	if r := f.do("POST", "/v1/approvals", key, job); r.status != 200 {
		t.Fatalf("request approval: %d %s", r.status, r.body)
	} else {
		r.decode(t, &req)
	}
	r := f.do("POST", "/v1/approvals/"+req.Digest+"/approve", keyApprover, nil)
	r.decode(t, &tok)
	if r.status != 200 || tok.Token == "" {
		t.Fatalf("approve: %d %s", r.status, r.body)
	}
	return tok
}

// A job's host paths are bounded in number: each file's content (up to a
// MiB) is hashed for the digest of every run and approval request, so
// thousands of names of one large file, within the grants' byte limit,
// cost gigabytes of hashing a request. 64 are taken, 65 refused.
func TestReadGrantsAreBounded(t *testing.T) {
	root := t.TempDir()
	big := filepath.Join(root, "big")
	if err := os.WriteFile(big, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, func(c *server.Config) {
		c.Tenants[0].ReadRoots = []string{root}
		rules := append(*c.Approvals.Rules, approve.Rule{Name: "reads", FSRead: new(true)})
		c.Approvals.Rules = &rules
	})
	if err := f.srv.Router().Unavailable("process"); err != nil {
		tiertest.Unavailable(t, "process", err)
	}
	job := func(n int) airlock.Job {
		j := airlock.Job{Kind: airlock.KindCommand, Situation: airlock.SituationInternal, Argv: []string{"true"}}
		for range n {
			j.Grants.FS.Read = append(j.Grants.FS.Read, big)
		}
		return j
	}
	if r := f.do("POST", "/v1/approvals", keyA, job(64)); r.status != 200 {
		t.Errorf("64 read grants: %d %.300s", r.status, r.body)
	}
	for _, ep := range []string{"/v1/approvals", "/v1/run"} {
		start := time.Now()
		r := f.do("POST", ep, keyA, job(5000))
		t.Logf("%s: %d in %v %.200s", ep, r.status, time.Since(start), r.body)
		if r.status != 400 || !strings.Contains(string(r.body), "grants.fs.read") || !strings.Contains(string(r.body), "at most 64") {
			t.Errorf("%s with 5000 read grants of a 1 MiB file: %d %.300s", ep, r.status, r.body)
		}
	}
}
