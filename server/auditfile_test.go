package server_test

import (
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testing/syncbuf"
	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
	"github.com/airlock-sandbox/airlock/server"
)

// tmpfs mounts a tmpfs of size bytes on a new directory, unmounted when
// the test ends.
func tmpfs(t *testing.T, size int) string {
	t.Helper()
	dir := t.TempDir()
	if os.Geteuid() != 0 {
		testenv.Skipf(t, "mounting a small tmpfs to fill needs root")
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		testenv.Skipf(t, "mounting a tmpfs: %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmounting the tmpfs: %v", err)
		}
	})
	return dir
}

// xJob is an expression job whose record names i.
func xJob(i int) string { return fmt.Sprintf(`{"kind":"expr","code":"x","input":{"x":%d}}`, i) }

// auditedXs counts the records of xJob runs in the files, by i.
func auditedXs(t *testing.T, files ...string) map[int]int {
	t.Helper()
	seen := map[int]int{}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
			if line == "" {
				continue
			}
			rec, err := server.ParseRecord([]byte(line))
			if err != nil {
				t.Fatalf("%s: %v: %s", file, err, line)
			}
			if rec.Job == nil {
				continue // a refusal
			}
			i, err := strconv.Atoi(fmt.Sprint(rec.Job.Input["x"]))
			if err != nil {
				t.Fatalf("%s: input %v", file, rec.Job.Input)
			}
			seen[i]++
		}
	}
	return seen
}

// metric reads one sample from /metrics.
func (f *fixture) metric(name string) string {
	f.t.Helper()
	r := f.do("GET", "/metrics", "", nil)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindSubmatch(r.body)
	if m == nil {
		f.t.Fatalf("no %s in /metrics", name)
	}
	return string(m[1])
}

// TestAuditFailsClosedOnFullDisk fills the disk under the audit file with
// real runs over HTTP: once a record cannot be written, runs are refused
// with 503 and the reason, the failure is counted and logged once, every
// run answered 200 has its record, and once there is room again runs
// succeed and the chain is intact.
func TestAuditFailsClosedOnFullDisk(t *testing.T) {
	dir := tmpfs(t, 64<<10)
	filler := filepath.Join(dir, "filler") // room to free later
	if err := os.WriteFile(filler, make([]byte, 16<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.Audit = filepath.Join(dir, "audit.jsonl")
	log := &syncbuf.Buffer{}
	srv, err := newServer(cfg, server.Options{Log: log})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { hs.Close(); srv.Close() })
	f := &fixture{t: t, srv: srv, http: hs}

	var answered []int // the runs answered 200
	var refused reply
	for i := 0; ; i++ {
		if i == 10_000 {
			t.Fatal("10000 runs did not fill a 64 KiB tmpfs")
		}
		r := f.do("POST", "/v1/run", keyA, xJob(i))
		if r.status != 200 {
			refused = r
			break
		}
		answered = append(answered, i)
	}
	body := string(refused.body)
	if refused.status != 503 || !strings.Contains(body, `"kind":"audit_unavailable"`) || !strings.Contains(body, "no space left on device") || strings.Count(strings.TrimSpace(body), "\n") != 0 {
		t.Fatalf("the run whose record did not fit: %d %s", refused.status, body)
	}
	if strings.Contains(body, dir) {
		t.Errorf("the refusal names the server's audit path: %s", body)
	}
	// Later runs are refused before they run, with the same reason.
	for i := range 3 {
		if r := f.do("POST", "/v1/run", keyA, xJob(100_000+i)); r.status != 503 || !strings.Contains(string(r.body), "no space left on device") {
			t.Fatalf("a run while the trail is full: %d %s", r.status, r.body)
		}
	}
	// At least the first failed run and the next one that ran were
	// counted (a refusal's smaller record may still fit, and lets the
	// next run try).
	if n, _ := strconv.Atoi(f.metric("airlock_audit_write_errors_total")); n < 2 {
		t.Errorf("airlock_audit_write_errors_total %d, want at least 2", n)
	}
	if v := f.metric("airlock_audit_failing"); v != "1" {
		t.Errorf("airlock_audit_failing %s while full", v)
	}
	if r := f.do("GET", "/healthz", "", nil); r.status != 503 {
		t.Errorf("healthz while full: %d", r.status)
	}
	if n := strings.Count(log.String(), "no space left on device"); n != 1 {
		t.Errorf("%d log lines for one failure episode:\n%s", n, log.String())
	}
	// Every run answered 200 has exactly one record; none else has one.
	seen := auditedXs(t, cfg.Audit)
	for _, i := range answered {
		if seen[i] != 1 {
			t.Errorf("run %d was answered 200 and has %d records", i, seen[i])
		}
	}
	if len(seen) != len(answered) {
		t.Errorf("%d runs recorded, %d answered 200", len(seen), len(answered))
	}
	t.Logf("%d runs answered before the disk filled", len(answered))

	// Room again: a run succeeds at the latest once the refusal before
	// it has been recorded.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if r := f.do("POST", "/v1/run", keyA, xJob(200_000)); r.status != 200 && r.status != 503 {
		t.Errorf("the first run after space was freed: %d %s", r.status, r.body)
	}
	if r := f.do("POST", "/v1/run", keyA, xJob(200_001)); r.status != 200 {
		t.Fatalf("a run once the trail can be written again: %d %s", r.status, r.body)
	}
	if v := f.metric("airlock_audit_failing"); v != "0" {
		t.Errorf("airlock_audit_failing %s after a good write", v)
	}
	if !strings.Contains(log.String(), "writing records again") {
		t.Errorf("no log line for the end of the episode:\n%s", log.String())
	}
	if data, _ := os.ReadFile(cfg.Audit); !strings.Contains(string(data), `"outcome":"refused_audit_unavailable"`) {
		t.Error("no refusal for the failing trail was recorded once it could be written")
	}
	if seen := auditedXs(t, cfg.Audit); seen[200_001] != 1 {
		t.Errorf("the run after recovery has %d records", seen[200_001])
	}
	if _, err := server.VerifyAudit([]string{cfg.Audit}); err != nil {
		t.Errorf("the chain after failed writes: %v", err)
	}
}

// With audit_fail_open, a run whose record cannot be written is answered
// anyway, and counted.
func TestAuditFailOpen(t *testing.T) {
	cfg := testConfig()
	cfg.AuditFailOpen = true
	srv, err := newServer(cfg, server.Options{Audit: failingWriter{}, Log: &syncbuf.Buffer{}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { hs.Close(); srv.Close() })
	f := &fixture{t: t, srv: srv, http: hs}
	for i := range 2 {
		if r := f.do("POST", "/v1/run", keyA, xJob(i)); r.status != 200 {
			t.Errorf("fail open: %d %s", r.status, r.body)
		}
	}
	if v := f.metric("airlock_audit_write_errors_total"); v != "2" {
		t.Errorf("airlock_audit_write_errors_total %s, want 2", v)
	}
}

// auditFiles lists a trail's files in the order written.
func auditFiles(t *testing.T, path string) []string {
	t.Helper()
	rotated, err := filepath.Glob(path + ".*")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(rotated)
	return append(rotated, path)
}

// TestAuditRotationUnderLoad rotates by size and by age while runs arrive
// concurrently: every record is in the files exactly once, the chain
// holds across files and across a restart, and retention bounds the
// rotated files.
func TestAuditRotationUnderLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	clk := &clock{t: time.Now()}
	start := func(rot server.AuditRotation) *fixture {
		cfg := testConfig()
		cfg.Audit, cfg.QueueWait, cfg.AuditRotation = path, server.Duration(time.Minute), &rot
		cfg.Tenants[0].ReadRoots = []string{filepath.Dir(path)}
		srv, err := newServer(cfg, server.Options{Now: clk.now})
		if err != nil {
			t.Fatal(err)
		}
		hs := httptest.NewServer(srv.Handler())
		return &fixture{t: t, srv: srv, http: hs, clock: clk}
	}
	stop := func(f *fixture) {
		f.http.Close()
		if err := f.srv.Close(); err != nil {
			t.Fatal(err)
		}
	}
	f := start(server.AuditRotation{MaxBytes: 8 << 10, MaxAge: server.Duration(time.Hour), Keep: 1000})
	const workers, each = 8, 40
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if w == 0 && i%10 == 0 {
					clk.add(2 * time.Hour) // the file in use is too old: rotate at the next write
				}
				if r := f.do("POST", "/v1/run", keyA, xJob(w*1000+i)); r.status != 200 {
					t.Errorf("run %d/%d: %d %s", w, i, r.status, r.body)
				}
			}
		}()
	}
	wg.Wait()
	// By age alone: a small file rotates once it is older than max_age.
	before := len(auditFiles(t, path))
	clk.add(2 * time.Hour)
	if r := f.do("POST", "/v1/run", keyA, xJob(9000)); r.status != 200 {
		t.Fatal(r.status, string(r.body))
	}
	if after := len(auditFiles(t, path)); after != before+1 {
		t.Errorf("%d files before and %d after a run past max_age", before, after)
	}
	stop(f)
	files := auditFiles(t, path)
	sum, err := server.VerifyAudit(files)
	if err != nil {
		t.Fatal(err)
	}
	seen := auditedXs(t, files...)
	for w := range workers {
		for i := range each {
			if seen[w*1000+i] != 1 {
				t.Errorf("run %d/%d has %d records across the files", w, i, seen[w*1000+i])
			}
		}
	}
	if want := workers*each + 1; sum.Records != want || len(seen) != want || sum.First != 1 {
		t.Errorf("verify saw %+v; want %d records from seq 1", sum, want)
	}
	if len(files) < 4 {
		t.Errorf("%d files for %d records of about 800 bytes in files of 8 KiB", len(files), sum.Records)
	}
	t.Logf("%d records in %d files", sum.Records, len(files))

	// A restart with a smaller retention: the chain continues from the
	// last record, and only the newest rotated files are kept.
	f = start(server.AuditRotation{MaxBytes: 4 << 10, Keep: 2})
	for i := range 20 {
		if r := f.do("POST", "/v1/run", keyA, xJob(10_000+i)); r.status != 200 {
			t.Fatal(r.status, string(r.body))
		}
	}
	stop(f)
	files = auditFiles(t, path)
	if len(files) != 3 {
		t.Errorf("keep: 2 left %d files: %v", len(files), files)
	}
	after, err := server.VerifyAudit(files)
	if err != nil {
		t.Fatal(err)
	}
	if after.Last != sum.Last+20 {
		t.Errorf("after the restart the chain ends at seq %d, want %d", after.Last, sum.Last+20)
	}
	// A tenant whose read root holds the trail may not be granted a
	// rotated file (other tenants' records) any more than the file.
	f = start(server.AuditRotation{})
	defer stop(f)
	expectDenied(t, f.do("POST", "/v1/run", keyA, readJob(files[0])), "the server keeps")
}

// The rotation settings are checked with one clear line each.
func TestAuditConfig(t *testing.T) {
	base := "tenants:\n  - name: a\n    key_sha256: " + server.HashKey(keyA) + "\n"
	for cfg, want := range map[string]string{
		"audit: a.jsonl\naudit_rotation:\n  max_bytes: -1\n": "audit_rotation.max_bytes: must not be negative",
		"audit: a.jsonl\naudit_rotation:\n  keep: -2\n":      "audit_rotation.keep: must not be negative",
		"audit: a.jsonl\naudit_rotation:\n  max_age: -1h\n":  "audit_rotation.max_age: must not be negative",
		"audit: a.jsonl\naudit_rotation:\n  max_age: soon\n": `invalid duration "soon"`,
		"audit: a.jsonl\naudit_rotation:\n  size: 10\n":      `unknown field "size"`,
		"audit_rotation:\n  keep: 3\n":                       "audit_rotation: rotation needs an audit file",
	} {
		_, err := server.ParseConfig([]byte(cfg + base))
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: %v, want one line with %q", cfg, err, want)
		}
	}
	c, err := server.ParseConfig([]byte("audit: a.jsonl\naudit_fail_open: true\naudit_rotation:\n  max_bytes: 1048576\n  max_age: 1h\n  keep: 3\n  keep_for: 168h\n" + base))
	if err != nil || !c.AuditFailOpen || *c.AuditRotation != (server.AuditRotation{MaxBytes: 1 << 20, MaxAge: server.Duration(time.Hour), Keep: 3, KeepFor: server.Duration(168 * time.Hour)}) {
		t.Errorf("a good configuration: %+v, %v", c, err)
	}
}
