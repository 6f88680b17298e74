package server_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/testing/pgtest"
	"github.com/airlock-sandbox/airlock/internal/testing/tiertest"
	"github.com/airlock-sandbox/airlock/internal/wirebytes"
	"github.com/airlock-sandbox/airlock/server"
)

// replica is one `airlock serve` of a service, in this process.
type replica struct {
	name  string
	url   string
	srv   *server.Server
	hs    *http.Server
	audit *syncBuffer
	done  chan struct{}
}

// startReplicas starts n replicas sharing the state setting, with one
// approval key, on loopback.
func startReplicas(t testing.TB, setting string, n int, mutate ...func(*server.Config)) []*replica {
	t.Helper()
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	keyFile := filepath.Join(t.TempDir(), "approval.key")
	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		t.Fatal(err)
	}
	var out []*replica
	for i := range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		cfg := testConfig()
		cfg.State = setting
		cfg.ReplicaID = fmt.Sprintf("r%d", i+1)
		cfg.Advertise = "http://" + ln.Addr().String()
		cfg.SessionLease = server.Duration(time.Second)
		cfg.Approvals.KeyFile = keyFile
		for _, m := range mutate {
			m(&cfg)
		}
		r := &replica{name: cfg.ReplicaID, url: cfg.Advertise, audit: &syncBuffer{}, done: make(chan struct{})}
		if r.srv, err = newServer(cfg, server.Options{Audit: r.audit}); err != nil {
			ln.Close()
			t.Fatal(err)
		}
		r.hs = &http.Server{Handler: r.srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
		go func() { defer close(r.done); _ = r.hs.Serve(ln) }()
		t.Cleanup(func() {
			_ = r.hs.Close()
			<-r.done
			_ = r.srv.Close()
		})
		out = append(out, r)
	}
	return out
}

type answer struct {
	status  int
	replica string
	body    []byte
}

func rcall(t testing.TB, method, url, key, body string, header ...string) answer {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header.Get(server.ReplicaHeader), data}
}

// TestReplicasShareOneService runs three replicas over one PostgreSQL
// database and checks that they act as one service.
func TestReplicasShareOneService(t *testing.T) {
	dsn := pgtest.Start(t)
	gate, open := tiertest.ShellGate(t)
	gate.Tier, gate.Situation = "process", airlock.SituationInternal
	gate.Limits.WallMS = 30_000
	rs := startReplicas(t, dsn, 3, func(c *server.Config) {
		c.Tenants[1].RunsPerMinute = 120
		c.Tenants[1].MaxConcurrent = 8
		c.Tenants[0].MaxConcurrent = 2
		c.Tenants[0].ReadRoots = gate.Grants.FS.Read
		c.Tenants[0].Limits.Max.WallMS = 30_000
		c.MaxSessions = 2
		// Long enough for slots other replicas hold idle to come back.
		c.QueueWait = server.Duration(2 * time.Second)
	})

	t.Run("runs spread over every replica", func(t *testing.T) {
		// Ready once the warm pools have filled, as a readiness probe waits.
		for _, r := range rs {
			for i := 0; ; i++ {
				a := rcall(t, "GET", r.url+"/readyz", "", "")
				if a.status == 200 && bytes.Contains(a.body, []byte(`"replica":"`+r.name+`"`)) {
					break
				}
				if a.status != 503 || i == 500 {
					t.Fatalf("%s is not ready: %d %s", r.name, a.status, a.body)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		seen := map[string]int{}
		for i := range 12 {
			r := rs[i%3]
			a := rcall(t, "POST", r.url+"/v1/run", keyA, `{"kind":"expr","code":"6*7"}`)
			if a.status != 200 || !bytes.Contains(a.body, []byte("42")) {
				t.Fatalf("run on %s: %d %s", r.name, a.status, a.body)
			}
			seen[a.replica]++
		}
		for _, r := range rs {
			if seen[r.name] != 4 {
				t.Errorf("replica %s answered %d runs, want 4 (%v)", r.name, seen[r.name], seen)
			}
			if !strings.Contains(strings.Join(r.audit.lines(), "\n"), `"replica":"`+r.name+`"`) {
				t.Errorf("replica %s's audit records do not name it", r.name)
			}
		}
		// Any replica lists the tenant's runs of every replica (records
		// are shared in batches, off the runs' path).
		for i := 0; ; i++ {
			var recs []server.Record
			a := rcall(t, "GET", rs[1].url+"/v1/audit", keyA, "")
			if err := json.Unmarshal(a.body, &recs); err != nil {
				t.Fatalf("audit: %d %s", a.status, a.body)
			}
			by := map[string]int{}
			for _, rec := range recs {
				by[rec.Replica]++
			}
			if by["r1"] == 4 && by["r2"] == 4 && by["r3"] == 4 {
				break
			}
			if i == 100 {
				t.Fatalf("r2 lists records by replica %v, want 4 of each", by)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})

	t.Run("an approval is redeemed once", func(t *testing.T) {
		job := `{"kind":"starlark","code":"result = 5","situation":"internal"}`
		var req struct{ Digest string }
		a := rcall(t, "POST", rs[0].url+"/v1/approvals", keyA, job)
		if err := json.Unmarshal(a.body, &req); err != nil || req.Digest == "" {
			t.Fatalf("requesting approval: %d %s", a.status, a.body)
		}
		// Asked on r1, listed and approved on r3, redeemed on r2.
		var listed []struct{ Digest string }
		a = rcall(t, "GET", rs[2].url+"/v1/approvals", keyApprover, "")
		if err := json.Unmarshal(a.body, &listed); err != nil || len(listed) != 1 || listed[0].Digest != req.Digest {
			t.Fatalf("r3 lists the pending approvals %d %s", a.status, a.body)
		}
		var tok struct{ Token string }
		a = rcall(t, "POST", rs[2].url+"/v1/approvals/"+req.Digest+"/approve", keyApprover, "")
		if err := json.Unmarshal(a.body, &tok); err != nil || tok.Token == "" {
			t.Fatalf("approving: %d %s", a.status, a.body)
		}
		// The decision is r3's; r1 shows it, with the same token, and no
		// longer lists the request as pending to decide.
		var dc struct{ Status, Token, Approver string }
		a = rcall(t, "GET", rs[0].url+"/v1/approvals/"+req.Digest+"/decision", keyA, "")
		if err := json.Unmarshal(a.body, &dc); err != nil || dc.Status != "approved" || dc.Token != tok.Token || dc.Approver == "" {
			t.Fatalf("r1 shows the decision made on r3: %d %s", a.status, a.body)
		}
		if a := rcall(t, "POST", rs[1].url+"/v1/run", keyA, job, server.ApprovalHeader, tok.Token); a.status != 200 {
			t.Fatalf("the first redemption, on r2: %d %s", a.status, a.body)
		}
		for _, r := range []*replica{rs[2], rs[0], rs[1]} {
			a := rcall(t, "POST", r.url+"/v1/run", keyA, job, server.ApprovalHeader, tok.Token)
			if a.status == 200 || !bytes.Contains(a.body, []byte("already redeemed")) {
				t.Errorf("the token again, on %s: %d %s", r.name, a.status, a.body)
			}
		}
		// r2's record of the run names r3's approver.
		if !strings.Contains(strings.Join(rs[1].audit.lines(), "\n"), `"approver":"`+dc.Approver+`"`) {
			t.Errorf("r2's record of the approved run does not name its approver %s", dc.Approver)
		}
	})

	t.Run("runs in flight hold across replicas", func(t *testing.T) {
		if err := rs[0].srv.Router().Unavailable("process"); err != nil {
			tiertest.Unavailable(t, "process", err)
		}
		// Tenant a may run 2 at once: one on r1, one on r2, both held
		// at the gate; r3 has no slot left to give a third.
		g1, g2 := startGated(t, rs[0].url, gate), startGated(t, rs[1].url, gate)
		a := rcall(t, "POST", rs[2].url+"/v1/run", keyA, `{"kind":"expr","code":"1"}`)
		if a.status != 429 || !bytes.Contains(a.body, []byte("across the replicas")) {
			t.Fatalf("a third run of a tenant limited to 2, on r3: %d %s", a.status, a.body)
		}
		// Once the two end, r3 runs (as soon as the others give back the
		// slots they keep idle, while the run waits its turn).
		open()
		for _, g := range []*gatedRun{g1, g2} {
			tiertest.CheckGated(t, g.finish(t))
		}
		if a := rcall(t, "POST", rs[2].url+"/v1/run", keyA, `{"kind":"expr","code":"1"}`); a.status != 200 {
			t.Fatalf("r3 once the runs ended: %d %s", a.status, a.body)
		}
	})

	t.Run("sessions per tenant hold across replicas", func(t *testing.T) {
		ids := map[*replica]string{}
		for _, r := range rs[:2] {
			var open struct{ ID string }
			a := rcall(t, "POST", r.url+"/v1/sessions", keyB, `{"tier":"starlark"}`)
			if err := json.Unmarshal(a.body, &open); err != nil || open.ID == "" {
				t.Fatalf("opening on %s: %d %s", r.name, a.status, a.body)
			}
			ids[r] = open.ID
		}
		if a := rcall(t, "POST", rs[2].url+"/v1/sessions", keyB, `{"tier":"starlark"}`); a.status != 429 || !bytes.Contains(a.body, []byte("across the replicas")) {
			t.Fatalf("a third session of a tenant limited to 2, on r3: %d %s", a.status, a.body)
		}
		if a := rcall(t, "DELETE", rs[0].url+"/v1/sessions/"+ids[rs[0]], keyB, ""); a.status/100 != 2 {
			t.Fatalf("closing on r1: %d %s", a.status, a.body)
		}
		var open struct{ ID string }
		a := rcall(t, "POST", rs[2].url+"/v1/sessions", keyB, `{"tier":"starlark"}`)
		if err := json.Unmarshal(a.body, &open); err != nil || open.ID == "" {
			t.Fatalf("opening on r3 once r1's closed: %d %s", a.status, a.body)
		}
		for r, id := range map[*replica]string{rs[1]: ids[rs[1]], rs[2]: open.ID} {
			if a := rcall(t, "DELETE", r.url+"/v1/sessions/"+id, keyB, ""); a.status/100 != 2 {
				t.Fatalf("closing on %s: %d %s", r.name, a.status, a.body)
			}
		}
	})

	t.Run("the rate quota holds across replicas", func(t *testing.T) {
		// 120 a minute: a bucket of 12 refilling 2 a second, leased 3 at
		// a time. Together the replicas admit what the bucket held and
		// what refilled meanwhile; they may refuse while at most 2 runs
		// sit leased and unused on each.
		const burst, batch, perSecond = 12, 3, 2.0
		start := time.Now()
		ok := 0
		for i := range 60 {
			a := rcall(t, "POST", rs[i%3].url+"/v1/run", keyB, `{"kind":"expr","code":"1+1"}`)
			switch a.status {
			case 200:
				ok++
			case 429:
			default:
				t.Fatalf("run %d: %d %s", i, a.status, a.body)
			}
		}
		refill := int(math.Ceil(time.Since(start).Seconds() * perSecond))
		if ok > burst+refill || ok < burst-3*(batch-1) {
			t.Fatalf("%d of 60 runs admitted, want at most %d (a burst of %d, %d refilled) and at least %d", ok, burst+refill, burst, refill, burst-3*(batch-1))
		}
	})

	t.Run("sessions are reached from every replica and lost with theirs", func(t *testing.T) {
		var open struct{ ID string }
		a := rcall(t, "POST", rs[0].url+"/v1/sessions", keyA, `{"tier":"starlark"}`)
		if err := json.Unmarshal(a.body, &open); err != nil || open.ID == "" {
			t.Fatalf("opening on r1: %d %s", a.status, a.body)
		}
		path := "/v1/sessions/" + open.ID + "/run"
		if a := rcall(t, "POST", rs[1].url+path, keyA, `{"kind":"starlark","code":"count = 1"}`); a.status != 200 || a.replica != "r1" {
			t.Fatalf("through r2: %d from %q: %s", a.status, a.replica, a.body)
		}
		a = rcall(t, "POST", rs[2].url+path, keyA, `{"kind":"starlark","code":"count += 1\nresult = count"}`)
		if a.status != 200 || a.replica != "r1" || !bytes.Contains(a.body, []byte(`"value":2`)) {
			t.Fatalf("through r3, the session's state: %d from %q: %s", a.status, a.replica, a.body)
		}
		if a := rcall(t, "POST", rs[1].url+path, keyB, `{"kind":"starlark","code":"x = 1"}`); a.status != 404 {
			t.Fatalf("another tenant through r2: %d %s", a.status, a.body)
		}

		// r1 dies: its listener and connections go at once, its leases stay.
		_ = rs[0].hs.Close()
		<-rs[0].done
		rs[0].srv.Crash()
		lost := false
		for i := 0; i < 100 && !lost; i++ {
			a := rcall(t, "POST", rs[1].url+path, keyA, `{"kind":"starlark","code":"result = count"}`)
			switch {
			case a.status == 410 && bytes.Contains(a.body, []byte("session_lost")):
				lost = true
			case a.status == 503: // r1 does not answer, and its lease holds yet
				time.Sleep(100 * time.Millisecond)
			default:
				t.Fatalf("after r1 died: %d %s", a.status, a.body)
			}
		}
		if !lost {
			t.Fatal("the session was never reported lost")
		}
		if a := rcall(t, "POST", rs[2].url+path, keyA, `{"kind":"starlark","code":"result = 1"}`); a.status != 410 {
			t.Fatalf("through r3 too: %d %s", a.status, a.body)
		}
		for _, r := range rs[1:] {
			if a := rcall(t, "POST", r.url+"/v1/run", keyA, `{"kind":"expr","code":"1"}`); a.status != 200 {
				t.Errorf("%s after r1 died: %d %s", r.name, a.status, a.body)
			}
		}
	})

	t.Run("a draining replica refuses new runs and finishes what it accepted", func(t *testing.T) {
		if err := rs[2].srv.Router().Unavailable("process"); err != nil {
			tiertest.Unavailable(t, "process", err)
		}
		r := rs[2]
		// The gate closes again (the file it waits for goes).
		if err := os.Remove(filepath.Join(gate.Grants.FS.Read[0], "open")); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		g1, g2 := startGated(t, r.url, gate), startGated(t, r.url, gate)
		shut := make(chan error, 1)
		go func() { shut <- r.srv.Shutdown(r.hs) }()
		// Serve returns once the drain closed the listener; the two runs
		// still hold their connections.
		<-r.done
		do := func(method, path, body string) *httptest.ResponseRecorder {
			w := httptest.NewRecorder()
			req := httptest.NewRequest(method, path, strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+keyA)
			r.srv.Handler().ServeHTTP(w, req)
			return w
		}
		if w := do("POST", "/v1/run", `{"kind":"expr","code":"1"}`); w.Code != 503 || w.Header().Get("Retry-After") == "" || !strings.Contains(w.Body.String(), "shutting down") {
			t.Errorf("a new run while draining: %d (Retry-After %q) %s", w.Code, w.Header().Get("Retry-After"), w.Body)
		}
		if w := do("GET", "/readyz", ""); w.Code != 503 || !strings.Contains(w.Body.String(), `"shutting_down":true`) {
			t.Errorf("readiness while draining: %d %s", w.Code, w.Body)
		}
		open()
		for _, g := range []*gatedRun{g1, g2} {
			tiertest.CheckGated(t, g.finish(t))
		}
		if err := <-shut; err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if resp, err := http.Get(r.url + "/healthz"); err == nil {
			resp.Body.Close()
			t.Error("the drained replica still answers")
		}
		if a := rcall(t, "POST", rs[1].url+"/v1/run", keyA, `{"kind":"expr","code":"1"}`); a.status != 200 {
			t.Errorf("r2 after r3 drained: %d %s", a.status, a.body)
		}
	})
}

// gatedRun is a streamed run held at a gate (tiertest.ShellGate).
type gatedRun struct {
	resp *http.Response
	r    *bufio.Reader
}

// startGated starts job (a ShellGate job) as tenant a on the replica at
// url and returns once it printed its first line: it runs, holding its
// slot, until the gate opens.
func startGated(t *testing.T, url string, job airlock.Job) *gatedRun {
	t.Helper()
	body, _ := json.Marshal(job)
	req, _ := http.NewRequest("POST", url+"/v1/run", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+keyA)
	req.Header.Set("Accept", "application/x-ndjson")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("a gated run: %d %s", resp.StatusCode, b)
	}
	g := &gatedRun{resp: resp, r: bufio.NewReader(resp.Body)}
	for {
		ev := nextEvent(t, g.r, false)
		if ev.name == "result" {
			t.Fatalf("the gated run ended before its first line: %s", ev.data)
		}
		if ev.name == "stdout" {
			if s, _ := wirebytes.Decode(ev.data); strings.Contains(s, "first") {
				return g
			}
		}
	}
}

// finish reads the rest of the run's answer and returns its Result.
func (g *gatedRun) finish(t *testing.T) airlock.Result {
	t.Helper()
	for {
		ev := nextEvent(t, g.r, false)
		if ev.name != "result" {
			continue
		}
		var res airlock.Result
		if err := json.Unmarshal(ev.data, &res); err != nil {
			t.Fatalf("result %s: %v", ev.data, err)
		}
		return res
	}
}

// BenchmarkStateStores compares cached expr runs over HTTP on a replica
// with the embedded state and on one with PostgreSQL, for a tenant with a
// rate quota (the only per-run use of the state, leased in batches). It
// reports both costs and their ratio; it asserts no timing.
func BenchmarkStateStores(b *testing.B) {
	quota := func(c *server.Config) { c.Tenants[1].RunsPerMinute = 1_000_000 }
	emb := startReplicas(b, "", 1, quota)[0]
	pg := startReplicas(b, pgtest.Start(b), 1, quota)[0]
	const job = `{"kind":"expr","code":"6*7"}`
	run := func(r *replica) time.Duration {
		start := time.Now()
		if a := rcall(b, "POST", r.url+"/v1/run", keyB, job); a.status != 200 {
			b.Fatalf("%s: %d %s", r.name, a.status, a.body)
		}
		return time.Since(start)
	}
	run(emb) // compile and cache the expression, take the first leases
	run(pg)
	var de, dp time.Duration
	b.ResetTimer()
	for range b.N {
		de += run(emb)
		dp += run(pg)
	}
	b.ReportMetric(float64(de.Nanoseconds())/float64(b.N), "embedded-ns/run")
	b.ReportMetric(float64(dp.Nanoseconds())/float64(b.N), "postgres-ns/run")
	b.ReportMetric(float64(dp)/float64(de), "postgres/embedded")
}
