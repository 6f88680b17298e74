package server

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// slowFile is an audit writer whose writes take a while, as a disk's can.
type slowFile struct {
	mu     sync.Mutex
	b      bytes.Buffer
	writes int
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

// TestAuditGroupCommit checks the audit trail's durability contract:
// add returns only once its own line is written, every line is written
// whole and exactly once, and lines that arrive together share writes.
func TestAuditGroupCommit(t *testing.T) {
	f := &slowFile{}
	a := newAuditor(f)
	const n = 200
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tenant := fmt.Sprintf("tenant-%03d", i)
			a.add(Record{Tenant: tenant, Outcome: "ok"})
			if !f.has(`"tenant":"` + tenant + `"`) {
				t.Errorf("add returned before %s's line was written", tenant)
			}
		}()
	}
	wg.Wait()
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
