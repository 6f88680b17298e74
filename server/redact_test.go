package server

import (
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
)

// No tier in every build admits credentials, so the redaction is tested
// on the record itself.
func TestRecordRedactsSecrets(t *testing.T) {
	var buf strings.Builder
	s := &Server{audit: newAuditor(&buf), now: time.Now}
	rq := &runRequest{t: &tenant{Tenant: Tenant{Name: "a"}}, job: airlock.Job{Kind: airlock.KindExpr, Code: "TOKEN",
		Grants: airlock.Grants{Secrets: map[string]string{"TOKEN": "hunter2-canary"}}}}
	res := airlock.Result{Tier: "expr", Value: "x"}
	s.record(rq, &res, "", "credentials", 0, time.Millisecond)
	line := buf.String()
	if strings.Contains(line, "hunter2") || !strings.Contains(line, `"TOKEN":"[redacted]"`) {
		t.Errorf("audit line: %s", line)
	}
	if rq.job.Grants.Secrets["TOKEN"] != "hunter2-canary" {
		t.Error("redaction changed the job that runs")
	}
}

func TestAuditRingKeepsTheLatestInOrder(t *testing.T) {
	a := newAuditor(nil)
	a.keep = 3
	for i := range 5 {
		a.add(Record{Tenant: "a", Seed: uint64(i)})
	}
	a.add(Record{Tenant: "b", Seed: 9})
	got := a.list("a")
	if len(got) != 3 || got[0].Seed != 2 || got[1].Seed != 3 || got[2].Seed != 4 {
		t.Errorf("ring: %+v", got)
	}
	if len(a.list("b")) != 1 || len(a.list("c")) != 0 {
		t.Error("records leak between tenants")
	}
	// A listing walks the ring a record at a time: from any number, the
	// oldest record still kept at or after it.
	for n, want := range map[uint64]uint64{0: 2, 2: 2, 3: 3, 4: 4} {
		if rec, num, ok := a.recentAt("a", n); !ok || num != want || rec.Seed != want {
			t.Errorf("recentAt(%d): seed %d, number %d, %v; want %d", n, rec.Seed, num, ok, want)
		}
	}
	if _, _, ok := a.recentAt("a", 5); ok || a.recentEnd("a") != 5 || a.recentEnd("c") != 0 {
		t.Errorf("past the end: %v, end %d", ok, a.recentEnd("a"))
	}
	if _, _, ok := a.recentAt("c", 0); ok {
		t.Error("a tenant without records has one")
	}
}
