package server

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/interp/expr"
)

// slowFile is an audit writer whose writes take a while, as a disk's can.
type slowFile struct {
	mu     sync.Mutex
	b      bytes.Buffer
	writes int
	synced int // bytes of b on "disk": written before the last Sync
	syncs  int
}

func (f *slowFile) Sync() error {
	time.Sleep(time.Millisecond)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.synced, f.syncs = f.b.Len(), f.syncs+1
	return nil
}

func (f *slowFile) hasSynced(s string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return bytes.Contains(f.b.Bytes()[:f.synced], []byte(s))
}

func (f *slowFile) Write(p []byte) (int, error) {
	time.Sleep(time.Millisecond)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.writes++
	return f.b.Write(p)
}

func (f *slowFile) has(s string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return bytes.Contains(f.b.Bytes(), []byte(s))
}

// addAtOnce adds n records from n goroutines and checks, as each add
// returns, that its line is already where done says (written, synced).
func addAtOnce(t *testing.T, a *auditor, n int, state string, done func(string) bool) {
	t.Helper()
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tenant := fmt.Sprintf("tenant-%03d", i)
			a.add(Record{Tenant: tenant, Outcome: "ok"})
			if !done(`"tenant":"` + tenant + `"`) {
				t.Errorf("add returned before %s's line was %s", tenant, state)
			}
		}()
	}
	wg.Wait()
}

// TestAuditGroupCommit checks the audit trail's durability contract:
// add returns only once its own line is written, every line is written
// whole and exactly once, and lines that arrive together share writes.
func TestAuditGroupCommit(t *testing.T) {
	f := &slowFile{}
	a := newAuditor(f)
	const n = 200
	addAtOnce(t, a, n, "written", f.has)
	lines := strings.Split(strings.TrimSuffix(f.b.String(), "\n"), "\n")
	if len(lines) != n {
		t.Fatalf("%d lines for %d records", len(lines), n)
	}
	seen := map[string]bool{}
	for _, l := range lines {
		r, err := ParseRecord([]byte(l))
		if err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		if seen[r.Tenant] {
			t.Errorf("%s written twice", r.Tenant)
		}
		seen[r.Tenant] = true
	}
	if f.writes >= n || uint64(f.writes) != a.writes {
		t.Errorf("%d writes (auditor counted %d) for %d concurrent records: not grouped", f.writes, a.writes, n)
	}
	t.Logf("%d records in %d writes", n, f.writes)
	if err := a.failed(); err != nil {
		t.Error(err)
	}
}

// TestAuditSync: with audit_sync, add returns only once its line is
// synced, and one sync serves a whole group write.
func TestAuditSync(t *testing.T) {
	f := &slowFile{}
	a := newAuditor(f)
	a.sync = f.Sync
	const n = 100
	addAtOnce(t, a, n, "synced", f.hasSynced)
	if f.syncs != f.writes || f.syncs >= n {
		t.Errorf("%d syncs for %d writes of %d records", f.syncs, f.writes, n)
	}
}

// TestAuditSyncConfig: audit_sync reaches the audit file.
func TestAuditSyncConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	cfg := Config{Audit: path, AuditSync: true, Tenants: []Tenant{{Name: "a", KeySHA256: HashKey("test-key-sync-0123456789abcdef0123")}}}
	s, err := New(cfg, []airlock.Tier{expr.New()}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s.audit.file == nil || !s.audit.file.sync {
		t.Error("audit_sync set, but the auditor does not sync")
	}
	s.audit.add(Record{Tenant: "a", Outcome: "ok"})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(path); err != nil || !strings.Contains(string(b), `"tenant":"a"`) {
		t.Errorf("audit file: %q, %v", b, err)
	}
}
