package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/approve"
	"github.com/airlock-sandbox/airlock/internal/testing/syncbuf"
	"github.com/airlock-sandbox/airlock/server"
)

// newFileFixture is a fixture whose server writes its audit trail to
// files in dir, rotated after maxBytes, with its console's tenants.
func newFileFixture(t *testing.T, dir string, maxBytes int64) *fixture {
	t.Helper()
	cfg := testConfig()
	consoleConfig(&cfg)
	cfg.Audit = filepath.Join(dir, "audit.jsonl")
	cfg.AuditRotation = &server.AuditRotation{MaxBytes: maxBytes, Keep: 100}
	f := &fixture{t: t, clock: &clock{t: time.Now()}}
	srv, err := newServer(cfg, server.Options{Now: f.clock.now, Log: &syncbuf.Buffer{}})
	if err != nil {
		t.Fatal(err)
	}
	f.srv, f.http = srv, httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		f.http.Close()
		srv.Close()
	})
	return f
}

// trailFiles lists the trail's files in the order written.
func trailFiles(t *testing.T, dir string) []string {
	t.Helper()
	rotated, err := filepath.Glob(filepath.Join(dir, "audit.jsonl.*"))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(rotated)
	return append(rotated, filepath.Join(dir, "audit.jsonl"))
}

// trailSeqs reads the seq and tenant of every record in the files.
func trailSeqs(t *testing.T, files []string) map[uint64]string {
	t.Helper()
	out := map[uint64]string{}
	for _, file := range files {
		for _, line := range readLinesOf(t, file) {
			var h struct {
				Seq    uint64 `json:"seq"`
				Tenant string `json:"tenant"`
			}
			if err := json.Unmarshal([]byte(line), &h); err != nil {
				t.Fatal(err)
			}
			out[h.Seq] = h.Tenant
		}
	}
	return out
}

func readLinesOf(t *testing.T, file string) []string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) == 0 {
		return nil
	}
	return strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
}

var recordRow = regexp.MustCompile(`href="/console/records/(\d+)">#(\d+)</a>`)

// auditPages follows the audit page's "Older records" links from path
// and returns the seqs listed, in order, and the pages read.
func (u *consoleUser) auditPages(path string) (seqs []uint64, pages int) {
	u.f.t.Helper()
	older := regexp.MustCompile(`href="(/console/audit\?[^"]*before=\d+[^"]*)" rel="next"`)
	for path != "" {
		status, page, _ := u.get(path)
		if status != 200 {
			u.f.t.Fatalf("%s: %d %s", path, status, page)
		}
		pages++
		for _, m := range recordRow.FindAllStringSubmatch(page, -1) {
			n, _ := strconv.ParseUint(m[1], 10, 64)
			seqs = append(seqs, n)
		}
		path = ""
		if m := older.FindStringSubmatch(page); m != nil {
			path = strings.ReplaceAll(m[1], "&amp;", "&")
		}
	}
	return seqs, pages
}

// TestConsoleAuditFromFiles: the console's audit page reads the audit
// files, rotated ones included and across a restart, a page at a time,
// newest first; it lists the approver's tenants' records only, and
// another tenant's record is not shown even when named by its seq. A
// record's page gives its FILE:N in the trail and its line as written.
func TestConsoleAuditFromFiles(t *testing.T) {
	dir := t.TempDir()
	f := newFileFixture(t, dir, 4<<10)
	for i := range 40 {
		if r := f.do("POST", "/v1/run", keyA, xJob(i)); r.status != 200 {
			t.Fatalf("run %d: %d %s", i, r.status, r.body)
		}
		if r := f.do("POST", "/v1/run", keyB, xJob(1000+i)); r.status != 200 {
			t.Fatalf("run b %d: %d %s", i, r.status, r.body)
		}
	}
	// A refusal, for the outcome search.
	if r := f.do("POST", "/v1/run", keyA, `{"kind":"expr","code":"1","situation":"expression"}`); r.status == 200 {
		t.Fatalf("a bad situation ran: %s", r.body)
	}
	f.http.Close()
	f.srv.Close()
	// A new process: its console has kept nothing, the files have it all.
	f = newFileFixture(t, dir, 4<<10)
	for i := range 20 {
		if r := f.do("POST", "/v1/run", keyA, xJob(100+i)); r.status != 200 {
			t.Fatalf("run %d: %d %s", 100+i, r.status, r.body)
		}
	}
	files := trailFiles(t, dir)
	if len(files) < 3 {
		t.Fatalf("the trail was not rotated: %v", files)
	}
	if _, err := server.VerifyAudit(files); err != nil {
		t.Fatal(err)
	}
	all := trailSeqs(t, files)
	var wantA []uint64
	for seq, tenant := range all {
		if tenant == "a" {
			wantA = append(wantA, seq)
		}
	}
	slices.Sort(wantA)
	slices.Reverse(wantA)

	u := f.signIn(keyApprover)
	status, page, _ := u.get("/console/audit")
	if status != 200 || !strings.Contains(page, "from the audit files") {
		t.Fatalf("audit page: %d %s", status, page)
	}
	got, pages := u.auditPages("/console/audit")
	if !slices.Equal(got, wantA) {
		t.Errorf("the audit pages list seqs\n%v\nwant tenant a's, newest first\n%v", got, wantA)
	}
	if pages != (len(wantA)+49)/50 {
		t.Errorf("%d records over %d pages", len(wantA), pages)
	}
	// Tenant b's approver sees b's records only.
	gotB, _ := f.signIn(keyApproverB).auditPages("/console/audit")
	if len(gotB) != 40 {
		t.Errorf("tenant b's approver sees %d records, want 40", len(gotB))
	}
	for _, seq := range gotB {
		if all[seq] != "b" {
			t.Errorf("tenant b's approver is shown record %d of tenant %q", seq, all[seq])
		}
	}
	// A search for another tenant's records finds none; the search is
	// kept across pages.
	if seqs, _ := u.auditPages("/console/audit?tenant=b"); len(seqs) != 0 {
		t.Errorf("approver a searched tenant b and was shown %v", seqs)
	}
	refused, _ := u.auditPages("/console/audit?outcome=refused")
	if len(refused) != 1 {
		t.Errorf("outcome=refused lists %v", refused)
	}
	ok, _ := u.auditPages("/console/audit?outcome=ok&tier=expr")
	if len(ok) != len(wantA)-1 {
		t.Errorf("outcome=ok&tier=expr lists %d records over its pages, want %d", len(ok), len(wantA)-1)
	}
	if seqs, _ := u.auditPages("/console/audit?since=" + url.QueryEscape(time.Now().Add(time.Hour).UTC().Format("2006-01-02T15:04"))); len(seqs) != 0 {
		t.Errorf("a search from an hour ahead lists %v", seqs)
	}

	// Another tenant's record, named by its seq, is not found.
	for seq, tenant := range all {
		if tenant != "b" {
			continue
		}
		for _, path := range []string{fmt.Sprintf("/console/records/%d", seq), fmt.Sprintf("/console/records/%d/line", seq)} {
			if status, page, _ := u.get(path); status != 404 || strings.Contains(page, `"tenant":"b"`) || strings.Contains(page, "1000") {
				t.Errorf("approver a asked for tenant b's %s: %d %s", path, status, page)
			}
		}
		break
	}
	for _, path := range []string{"/console/records/0", "/console/records/99999", "/console/records/x"} {
		if status, _, _ := u.get(path); status != 404 {
			t.Errorf("%s: %d", path, status)
		}
	}

	// The oldest record of tenant a is in a rotated file: its page names
	// that file and line, and its download is that line.
	oldest := wantA[len(wantA)-1]
	status, page, _ = u.get(fmt.Sprintf("/console/records/%d", oldest))
	m := regexp.MustCompile(`airlock replay (\S+):(\d+)</pre>`).FindStringSubmatch(page)
	if status != 200 || m == nil {
		t.Fatalf("record %d: %d %s", oldest, status, page)
	}
	n, _ := strconv.Atoi(m[2])
	lines := readLinesOf(t, m[1])
	if m[1] == files[len(files)-1] || n < 1 || n > len(lines) {
		t.Fatalf("record %d is given as %s:%s, not a line of a rotated file", oldest, m[1], m[2])
	}
	status, line, h := u.get(fmt.Sprintf("/console/records/%d/line", oldest))
	if status != 200 || line != lines[n-1]+"\n" || !strings.Contains(h.Get("Content-Disposition"), "attachment") {
		t.Errorf("the record's download: %d %q, want line %d of %s: %q", status, line, n, m[1], lines[n-1])
	}
	if rec, err := server.ParseRecord([]byte(line)); err != nil || rec.Tenant != "a" {
		t.Errorf("the downloaded record: %v %+v", err, rec)
	}
	// A record of this process also shows its result: the result of
	// that record's run, also when runs were written together.
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			if r := f.do("POST", "/v1/run", keyA, xJob(500+i)); r.status != 200 {
				t.Errorf("run %d: %d %s", 500+i, r.status, r.body)
			}
		})
	}
	wg.Wait()
	checked := 0
	for _, file := range trailFiles(t, dir) {
		for _, line := range readLinesOf(t, file) {
			var h struct {
				Seq uint64 `json:"seq"`
				Job *struct {
					Input struct{ X int } `json:"input"`
				} `json:"job"`
			}
			if json.Unmarshal([]byte(line), &h); h.Job == nil || h.Job.Input.X < 500 || h.Job.Input.X >= 600 {
				continue
			}
			status, page, _ := u.get(fmt.Sprintf("/console/records/%d", h.Seq))
			if want := fmt.Sprintf(`<div id="value"><pre class="val">%d</pre>`, h.Job.Input.X); status != 200 || !strings.Contains(page, want) {
				t.Errorf("record %d (run %d) does not show its own result %s: %d", h.Seq, h.Job.Input.X, want, status)
			}
			checked++
		}
	}
	if checked != 16 {
		t.Errorf("%d of 16 concurrent runs found in the trail", checked)
	}
}

// decide approves or denies digest d in the console, as its form does.
func (u *consoleUser) decide(d approve.Digest, verdict, reason string) {
	u.f.t.Helper()
	form := url.Values{"csrf": {u.csrf()}, "decision": {verdict}, "reason": {reason}}
	if status, body, _ := u.post("/console/approvals/"+string(d), form, "Origin", u.f.http.URL); status != http.StatusSeeOther {
		u.f.t.Fatalf("%s %s: %d %s", verdict, d, status, body)
	}
}

// TestConsoleDiffFromTrail: once the decisions are no longer kept (here:
// a restart), a job is diffed against the newest approved job of its
// tenant and kind in the audit files: not a denied one, not another
// tenant's, not one of another kind.
func TestConsoleDiffFromTrail(t *testing.T) {
	dir := t.TempDir()
	f := newFileFixture(t, dir, 1<<20)
	u := f.signIn(keyApprover)
	approved := f.requestApproval(keyA, starlarkJob("result = 1"))
	u.decide(approved, "approve", "one is fine")
	u.decide(f.requestApproval(keyA, starlarkJob("result = 666")), "deny", "not this")
	uB := f.signIn(keyApproverB)
	uB.decide(f.requestApproval(keyB, starlarkJob("result = 777")), "approve", "b's own")
	f.http.Close()
	f.srv.Close()

	f = newFileFixture(t, dir, 1<<20)
	u = f.signIn(keyApprover)
	d := f.requestApproval(keyA, starlarkJob("result = 2"))
	status, page, _ := u.get("/console/approvals/" + string(d))
	if status != 200 {
		t.Fatalf("detail: %d %s", status, page)

	}
	if strings.Contains(page, "No earlier approved") {
		t.Fatal("after a restart the job is compared with nothing: the approved job in the trail was not found")
	}
	for _, want := range []string{`<span class="ddel">- code: result = 1</span>`, `<span class="dadd">+ code: result = 2</span>`} {
		if !strings.Contains(html.UnescapeString(page), want) {
			t.Errorf("the diff lacks %s", want)
		}
	}
	for _, not := range []string{"666", "777"} {
		if strings.Contains(page, not) {
			t.Errorf("the diff is against a job with %s (denied, or another tenant's)", not)
		}
	}
	m := regexp.MustCompile(`<a href="(/console/records/\d+)" id="diff-base">`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no link to the approved job's record: %s", page)
	}
	if status, rec, _ := u.get(m[1]); status != 200 || !strings.Contains(rec, "one is fine") || !strings.Contains(rec, "Not replayable") {
		t.Errorf("the base's record page: %d %s", status, rec)
	}
	// The approval's record holds the job, but is not a run to replay.
	_, line, _ := u.get(m[1] + "/line")
	rec, err := server.ParseRecord([]byte(line))
	if err != nil || rec.Request != "approval" || rec.Job == nil {
		t.Fatalf("the approval's record: %v %s", err, line)
	}
	if _, _, err := server.Replay(context.Background(), rec, nil); !errors.Is(err, server.ErrNotReplayable) {
		t.Errorf("replaying an approval's record: %v", err)
	}
}
