package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// openTrail opens the trail at path as the server does, with the default
// rotation.
func openTrail(t *testing.T, path string) *auditor {
	t.Helper()
	af, ch, err := openAuditFile(path, (*AuditRotation)(nil).settings(), false, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	a := newAuditor(nil)
	a.file, a.chain = af, ch
	t.Cleanup(func() { a.close() })
	return a
}

// A restart continues the chain; a torn last line (a write a crash cut
// short, whose runs were never answered) is cut off first.
func TestAuditRestartContinuesTheChain(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	a := openTrail(t, path)
	for range 3 {
		if err := a.add(Record{Tenant: "a", Tier: "expr", Outcome: "ok"}); err != nil {
			t.Fatal(err)
		}
	}
	a.close()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"seq":4,"prev":"00`)
	f.Close()
	a = openTrail(t, path)
	if err := a.add(Record{Tenant: "a", Tier: "expr", Outcome: "ok"}); err != nil {
		t.Fatal(err)
	}
	a.close()
	sum, err := VerifyAudit([]string{path})
	if err != nil || sum.Records != 4 || sum.Last != 4 {
		t.Errorf("after a torn line and a restart: %+v, %v", sum, err)
	}
}

// A file written before the chain existed is rotated aside, so the chain
// starts whole in a new file.
func TestAuditUnchainedFileIsRotatedAside(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	if err := os.WriteFile(path, []byte(`{"time":"2026-01-01T00:00:00Z","tenant":"a","outcome":"ok"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := openTrail(t, path)
	if err := a.add(Record{Tenant: "a", Tier: "expr", Outcome: "ok"}); err != nil {
		t.Fatal(err)
	}
	a.close()
	rotated, _ := filepath.Glob(path + ".*")
	if len(rotated) != 1 {
		t.Fatalf("rotated: %v", rotated)
	}
	if old, _ := os.ReadFile(rotated[0]); !strings.Contains(string(old), `"tenant":"a"`) {
		t.Errorf("the old file was not kept: %q", old)
	}
	if sum, err := VerifyAudit([]string{path}); err != nil || sum.First != 1 || sum.Records != 1 {
		t.Errorf("the new file: %+v, %v", sum, err)
	}
	if _, err := VerifyAudit([]string{rotated[0], path}); err == nil || !strings.Contains(err.Error(), ":1: a record without a seq") {
		t.Errorf("verify over the unchained file: %v", err)
	}
}
