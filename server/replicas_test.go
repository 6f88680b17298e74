package server_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/testing/pgtest"
	"github.com/airlock-sandbox/airlock/internal/testing/syncbuf"
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
	audit *syncbuf.Buffer
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
		out = append(out, startReplica(t, setting, fmt.Sprintf("r%d", i+1), keyFile, mutate...))
	}
	return out
}

// startReplica starts the replica named name on a fresh loopback port.
func startReplica(t testing.TB, setting, name, keyFile string, mutate ...func(*server.Config)) *replica {
	t.Helper()
	return startReplicaClock(t, setting, name, keyFile, 0, mutate...)
}

// startReplicaClock is startReplica for a replica whose clock is off by
// clockError.
func startReplicaClock(t testing.TB, setting, name, keyFile string, clockError time.Duration, mutate ...func(*server.Config)) *replica {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.State = setting
	cfg.ReplicaID = name
	cfg.Advertise = "http://" + ln.Addr().String()
	cfg.SessionLease = server.Duration(time.Second)
	cfg.Approvals.KeyFile = keyFile
	for _, m := range mutate {
		m(&cfg)
	}
	r := &replica{name: cfg.ReplicaID, url: cfg.Advertise, audit: &syncbuf.Buffer{}, done: make(chan struct{})}
	if r.srv, err = newServer(cfg, server.WithClockError(server.Options{Audit: r.audit}, clockError)); err != nil {
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
	return r
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
			if !bytes.Contains(a.body, []byte(`"replica":"`+r.name+`"`)) {
				t.Errorf("the Result from %s does not name it: %s", r.name, a.body)
			}
		}
		for _, r := range rs {
			if seen[r.name] != 4 {
				t.Errorf("replica %s answered %d runs, want 4 (%v)", r.name, seen[r.name], seen)
			}
			if !strings.Contains(strings.Join(r.audit.Lines(), "\n"), `"replica":"`+r.name+`"`) {
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
		if !strings.Contains(strings.Join(rs[1].audit.Lines(), "\n"), `"approver":"`+dc.Approver+`"`) {
			t.Errorf("r2's record of the approved run does not name its approver %s", dc.Approver)
		}
		// Asked for again on r1, its token spent: every replica shows it
		// pending, and r3's approvers list it and approve it anew.
		if a := rcall(t, "POST", rs[0].url+"/v1/approvals", keyA, job); a.status != 200 {
			t.Fatalf("asking again: %d %s", a.status, a.body)
		}
		for _, r := range rs {
			a := rcall(t, "GET", r.url+"/v1/approvals/"+req.Digest+"/decision", keyA, "")
			if !bytes.Contains(a.body, []byte(`"status":"pending"`)) || bytes.Contains(a.body, []byte(tok.Token)) {
				t.Errorf("asked again, %s shows the decision %d %s", r.name, a.status, a.body)
			}
		}
		a = rcall(t, "GET", rs[2].url+"/v1/approvals", keyApprover, "")
		if err := json.Unmarshal(a.body, &listed); err != nil || len(listed) != 1 || listed[0].Digest != req.Digest {
			t.Errorf("asked again, r3 lists the pending approvals %d %s", a.status, a.body)
		}
		var again struct{ Token string }
		a = rcall(t, "POST", rs[2].url+"/v1/approvals/"+req.Digest+"/approve", keyApprover, "")
		if err := json.Unmarshal(a.body, &again); err != nil || again.Token == "" || again.Token == tok.Token {
			t.Fatalf("approving again: %d %s", a.status, a.body)
		}
		if a := rcall(t, "POST", rs[1].url+"/v1/run", keyA, job, server.ApprovalHeader, again.Token); a.status != 200 {
			t.Errorf("the run approved again, on r2: %d %s", a.status, a.body)
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

// BenchmarkReplicasTogether compares cached expr runs over HTTP from 8
// concurrent clients on one replica with PostgreSQL and spread over three
// sharing it, for a tenant with both quotas (so the state is used). It
// reports both rates and their ratio; it asserts no timing.
func BenchmarkReplicasTogether(b *testing.B) {
	dsn := pgtest.Start(b)
	quota := func(c *server.Config) {
		c.Tenants[1].RunsPerMinute = 100_000_000
		c.Tenants[1].MaxConcurrent = 64
	}
	one := startReplicas(b, dsn, 1, quota)
	three := startReplicas(b, dsn, 3, quota)
	const clients, job = 8, `{"kind":"expr","code":"6*7"}`
	run := func(rs []*replica, n int) time.Duration {
		var wg sync.WaitGroup
		start := time.Now()
		for c := range clients {
			wg.Go(func() {
				for i := c; i < n; i += clients {
					r := rs[i%len(rs)]
					if a := rcall(b, "POST", r.url+"/v1/run", keyB, job); a.status != 200 {
						b.Errorf("%s: %d %s", r.name, a.status, a.body)
						return
					}
				}
			})
		}
		wg.Wait()
		return time.Since(start)
	}
	run(one, 3*clients) // compile and cache, take the first leases and slots
	run(three, 3*clients)
	b.ResetTimer()
	d1 := run(one, b.N)
	d3 := run(three, b.N)
	b.ReportMetric(float64(b.N)/d1.Seconds(), "one-runs/s")
	b.ReportMetric(float64(b.N)/d3.Seconds(), "three-runs/s")
	b.ReportMetric(d1.Seconds()/d3.Seconds(), "three/one")
}

// BenchmarkStateOverhead measures what the shared state adds to the
// median run: an approved run (its token redeemed in PostgreSQL) against
// the same on the embedded state, and a session run forwarded by another
// replica against one sent to the session's own. It reports the medians'
// differences in milliseconds; it asserts no timing.
func BenchmarkStateOverhead(b *testing.B) {
	dsn := pgtest.Start(b)
	emb := startReplicas(b, "", 1)[0]
	pg := startReplicas(b, dsn, 2)
	median := func(ds []time.Duration) float64 {
		slices.Sort(ds)
		return float64(ds[len(ds)/2].Microseconds()) / 1000
	}
	approved := func(r *replica, i int) time.Duration {
		job := fmt.Sprintf(`{"kind":"starlark","code":"result = %d","situation":"internal"}`, i)
		var req struct{ Digest string }
		if err := json.Unmarshal(rcall(b, "POST", r.url+"/v1/approvals", keyA, job).body, &req); err != nil {
			b.Fatal(err)
		}
		var tok struct{ Token string }
		if err := json.Unmarshal(rcall(b, "POST", r.url+"/v1/approvals/"+req.Digest+"/approve", keyApprover, "").body, &tok); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if a := rcall(b, "POST", r.url+"/v1/run", keyA, job, server.ApprovalHeader, tok.Token); a.status != 200 {
			b.Fatalf("%s: %d %s", r.name, a.status, a.body)
		}
		return time.Since(start)
	}
	var open struct{ ID string }
	if err := json.Unmarshal(rcall(b, "POST", pg[0].url+"/v1/sessions", keyA, `{"tier":"starlark"}`).body, &open); err != nil || open.ID == "" {
		b.Fatalf("opening a session: %v", err)
	}
	sessionRun := func(r *replica) time.Duration {
		start := time.Now()
		if a := rcall(b, "POST", r.url+"/v1/sessions/"+open.ID+"/run", keyA, `{"kind":"starlark","code":"result = 1"}`); a.status != 200 {
			b.Fatalf("through %s: %d %s", r.name, a.status, a.body)
		}
		return time.Since(start)
	}
	var redeemEmb, redeemPG, direct, forwarded []time.Duration
	b.ResetTimer()
	for i := range b.N {
		if i < 200 { // under the tenant's bound on pending approvals
			redeemEmb = append(redeemEmb, approved(emb, i))
			redeemPG = append(redeemPG, approved(pg[0], i))
		}
		direct = append(direct, sessionRun(pg[0]))
		forwarded = append(forwarded, sessionRun(pg[1]))
	}
	b.ReportMetric(median(redeemPG)-median(redeemEmb), "redeem-added-ms")
	b.ReportMetric(median(forwarded)-median(direct), "routing-added-ms")
}

// TestRollingRestartLosesNoRun restarts three replicas over one database
// one at a time (each drained as on SIGTERM, then started again under its
// name) while clients keep sending runs, going to another replica when
// one refuses (503) or does not answer, as a load balancer would. Every
// run is answered with its own value, and each ran exactly once: one
// audit record per run across every replica's trails.
func TestRollingRestartLosesNoRun(t *testing.T) {
	dsn := pgtest.Start(t)
	quota := func(c *server.Config) { c.Tenants[1].MaxConcurrent = 16 }
	rs := startReplicas(t, dsn, 3, quota)
	var mu sync.Mutex
	urls := []string{rs[0].url, rs[1].url, rs[2].url}
	trails := []*syncbuf.Buffer{rs[0].audit, rs[1].audit, rs[2].audit}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}} // a retried request was never sent on a closing connection

	var retried atomic.Int64
	// run sends job i until a replica answers it with a Result.
	run := func(i int) error {
		body := fmt.Sprintf(`{"kind":"expr","code":"%d + 0"}`, i)
		for attempt := range 300 {
			mu.Lock()
			url := urls[(i+attempt)%3]
			mu.Unlock()
			req, _ := http.NewRequest("POST", url+"/v1/run", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+keyB)
			resp, err := client.Do(req)
			if err != nil {
				retried.Add(1)
				continue // refused at connect: that replica is down
			}
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			switch resp.StatusCode {
			case 200:
				if !bytes.Contains(data, []byte(fmt.Sprintf(`"value":%d,`, i))) {
					return fmt.Errorf("run %d answered %s", i, data)
				}
				return nil
			case 503:
				retried.Add(1)
				continue // draining: another replica takes it
			default:
				return fmt.Errorf("run %d: %d %s", i, resp.StatusCode, data)
			}
		}
		return fmt.Errorf("run %d: no replica answered", i)
	}

	stop := make(chan struct{})
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := run(int(next.Add(1))); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	for k, r := range rs {
		// Each restart starts while runs are flowing.
		for from := next.Load(); next.Load() < from+50; {
			runtime.Gosched()
		}
		if err := r.srv.Shutdown(r.hs); err != nil {
			t.Errorf("draining %s: %v", r.name, err)
		}
		<-r.done
		again := startReplica(t, dsn, r.name, "", quota)
		mu.Lock()
		urls[k] = again.url
		trails = append(trails, again.audit)
		mu.Unlock()
	}
	for from := next.Load(); next.Load() < from+50; {
		runtime.Gosched()
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	sent := int(next.Load())
	ran := map[string]int{}
	for _, tr := range trails {
		for _, line := range tr.Lines() {
			var rec server.Record
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("a record: %v: %s", err, line)
			}
			if rec.Request == "run" && rec.Outcome == "ok" && rec.Job != nil {
				ran[rec.Job.Code]++
			}
		}
	}
	// Every run a client started was answered (or reported above).
	answered := 0
	for i := 1; i <= sent; i++ {
		switch n := ran[fmt.Sprintf("%d + 0", i)]; {
		case n > 1:
			t.Errorf("run %d ran %d times", i, n)
		case n == 1:
			answered++
		}
	}
	if answered != sent {
		t.Errorf("%d of %d runs have a record", answered, sent)
	}
	// The old replica's address refuses until the clients learn the new
	// one: they must have gone elsewhere at least once.
	if retried.Load() == 0 {
		t.Error("no run was ever sent to another replica: the restarts went unseen")
	}
	t.Logf("%d runs over three rolling restarts, %d sent again elsewhere", sent, retried.Load())
}

// cuttableState starts a PostgreSQL reached through a relay on a Unix
// socket, and returns the state setting through it, the relay's
// directory, and a function cutting it (every connection and the
// listener).
func cuttableState(t *testing.T) (setting, relay string, cut func()) {
	rl := relayState(t, pgtest.Start(t))
	return rl.setting, rl.dir, rl.cut
}

// stateRelay relays a replica's connections to PostgreSQL, counting the
// bytes each way.
type stateRelay struct {
	setting, dir string
	cut          func()
	sent, got    atomic.Int64 // to the database, from it

	mu    sync.Mutex
	binds map[string]int // statements executed (Bind messages), by a word of their SQL
	words []string       // the words counted
}

// count sets the words of SQL whose executions the relay counts.
func (rl *stateRelay) count(words ...string) {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	rl.words, rl.binds = words, map[string]int{}
}

// executed returns how many statements holding word were executed.
func (rl *stateRelay) executed(word string) int {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	return rl.binds[word]
}

// watch reads a client's stream of PostgreSQL messages as it passes:
// the startup message, then typed messages; it notes each statement's
// text when prepared (Parse), and counts its executions (Bind).
func (rl *stateRelay) watch(r io.Reader) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return
	}
	if _, err := io.CopyN(io.Discard, r, int64(binary.BigEndian.Uint32(n[:]))-4); err != nil {
		return
	}
	stmts := map[string]string{}
	for {
		var head [5]byte
		if _, err := io.ReadFull(r, head[:]); err != nil {
			return
		}
		body := make([]byte, int(binary.BigEndian.Uint32(head[1:]))-4)
		if _, err := io.ReadFull(r, body); err != nil {
			return
		}
		name, rest, _ := bytes.Cut(body, []byte{0})
		switch head[0] {
		case 'P':
			query, _, _ := bytes.Cut(rest, []byte{0})
			stmts[string(name)] = string(query)
		case 'B':
			_, stmt, _ := bytes.Cut(body, []byte{0}) // the portal's name, then the statement's
			stmt, _, _ = bytes.Cut(stmt, []byte{0})
			rl.mu.Lock()
			for _, w := range rl.words {
				if strings.Contains(stmts[string(stmt)], w) {
					rl.binds[w]++
				}
			}
			rl.mu.Unlock()
		}
	}
}

func relayState(t *testing.T, dsn string) *stateRelay {
	host := strings.TrimPrefix(strings.Fields(dsn)[0], "host=")
	rl := &stateRelay{dir: t.TempDir()}
	ln, err := net.Listen("unix", filepath.Join(rl.dir, ".s.PGSQL.5432"))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("unix", filepath.Join(host, ".s.PGSQL.5432"))
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, up)
			mu.Unlock()
			pr, pw := io.Pipe()
			go rl.watch(pr)
			go func() {
				_, _ = io.Copy(io.MultiWriter(countingWriter{up, &rl.sent}, pw), c)
				up.Close()
				pw.Close()
			}()
			go func() { _, _ = io.Copy(countingWriter{c, &rl.got}, up); c.Close() }()
		}
	}()
	rl.cut = func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	}
	t.Cleanup(rl.cut)
	rl.setting = strings.Replace(dsn, host, rl.dir, 1)
	return rl
}

// countingWriter counts what passes through it as it passes.
type countingWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// /readyz answers anyone: when the shared state does not answer, it says
// so, and the store's error, which names the database, its user and where
// it lives, goes to the server's log, once per outage.
func TestReadyzKeepsStateErrorsToTheLog(t *testing.T) {
	setting, relay, cut := cuttableState(t)
	cfg := testConfig()
	cfg.State = setting
	cfg.ReplicaID, cfg.Advertise = "r1", "http://127.0.0.1:1"
	var log syncbuf.Buffer
	srv, err := newServer(cfg, server.Options{Audit: &syncbuf.Buffer{}, Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	probe := func() *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		srv.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/readyz", nil))
		return w
	}
	for i := 0; probe().Code != 200; i++ {
		if i == 500 {
			t.Fatalf("not ready: %s", probe().Body)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cut()
	var w *httptest.ResponseRecorder
	for i := 0; ; i++ {
		if w = probe(); w.Code == 503 || i == 100 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	body := w.Body.String()
	if w.Code != 503 || !strings.Contains(body, `"state":"unreachable`) || strings.Contains(body, relay) || strings.Contains(body, "user") {
		t.Errorf("readyz with the state cut off: %d %s", w.Code, body)
	}
	probe()
	if n := strings.Count(log.String(), "the shared state does not answer: "); n != 1 || !strings.Contains(log.String(), relay) {
		t.Errorf("the log has %d reports of the outage, want one with the error:\n%s", n, log.String())
	}
}

// A job's code or output may hold any character, NUL too, which
// PostgreSQL's jsonb refuses: its record, and the other tenants' records
// shipped in the same batch, must still be listed by every replica.
func TestSharedRecordsTakeAnyText(t *testing.T) {
	dsn := pgtest.Start(t)
	rs := startReplicas(t, dsn, 2)
	nul := rcall(t, "POST", rs[0].url+"/v1/run", keyA, `{"kind":"starlark","code":"result = 1 # \u0000"}`)
	plain := rcall(t, "POST", rs[0].url+"/v1/run", keyB, `{"kind":"expr","code":"6*7"}`)
	if nul.status != 200 || plain.status != 200 {
		t.Fatalf("runs: %d %s; %d %s", nul.status, nul.body, plain.status, plain.body)
	}
	for _, c := range []struct{ key, want string }{{keyA, "# \x00"}, {keyB, "6*7"}} {
		for i := 0; ; i++ {
			var recs []server.Record
			a := rcall(t, "GET", rs[1].url+"/v1/audit", c.key, "")
			if err := json.Unmarshal(a.body, &recs); err != nil {
				t.Fatalf("audit: %d %s", a.status, a.body)
			}
			if len(recs) == 1 && recs[0].Job != nil && strings.Contains(recs[0].Job.Code, c.want) {
				break
			}
			if i == 100 {
				t.Fatalf("the other replica lists %d records, want one of code %q: %s\nlog: %s", len(recs), c.want, a.body, rs[0].audit.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// With the shared state out of reach, what a tenant asks of it is
// refused with 503, saying what could not be done; the store's error
// (the database's address, user and name) goes to the log, never to the
// client nor into the audit record of the refusal the tenant lists.
func TestStateErrorsStayInTheLog(t *testing.T) {
	setting, relay, cut := cuttableState(t)
	var log syncbuf.Buffer
	audit := &syncbuf.Buffer{}
	cfg := testConfig()
	cfg.State = setting
	cfg.ReplicaID, cfg.Advertise = "r1", "http://127.0.0.1:1"
	cfg.Tenants[1].RunsPerMinute = 120
	srv, err := newServer(cfg, server.Options{Audit: audit, Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	defer srv.Close()
	defer hs.Close()
	// An approval asked and given while the state answers, redeemed after.
	job := `{"kind":"starlark","code":"result = 5","situation":"internal"}`
	var req struct{ Digest string }
	a := rcall(t, "POST", hs.URL+"/v1/approvals", keyA, job)
	if err := json.Unmarshal(a.body, &req); err != nil || req.Digest == "" {
		t.Fatalf("requesting approval: %d %s", a.status, a.body)
	}
	var tok struct{ Token string }
	a = rcall(t, "POST", hs.URL+"/v1/approvals/"+req.Digest+"/approve", keyApprover, "")
	if err := json.Unmarshal(a.body, &tok); err != nil || tok.Token == "" {
		t.Fatalf("approving: %d %s", a.status, a.body)
	}
	cut()
	for _, c := range []struct{ what, method, path, key, body, token string }{
		{"a run of a tenant with a rate quota", "POST", "/v1/run", keyB, `{"kind":"expr","code":"1"}`, ""},
		{"a run of a tenant with runs in flight shared", "POST", "/v1/run", keyA, `{"kind":"expr","code":"1"}`, ""},
		{"an approved run", "POST", "/v1/run", keyA, job, tok.Token},
		{"a session opened", "POST", "/v1/sessions", keyA, `{"tier":"starlark"}`, ""},
		{"a session of another replica", "POST", "/v1/sessions/s-00000000000000000000000000000000/run", keyA, `{"kind":"starlark","code":"result = 1"}`, ""},
		{"an approval asked", "POST", "/v1/approvals", keyA, `{"kind":"starlark","code":"result = 6","situation":"internal"}`, ""},
		{"the audit records", "GET", "/v1/audit", keyA, "", ""},
	} {
		a := rcall(t, c.method, hs.URL+c.path, c.key, c.body, server.ApprovalHeader, c.token)
		if a.status != 503 || !bytes.Contains(a.body, []byte("the shared state does not answer")) ||
			bytes.Contains(a.body, []byte(relay)) || bytes.Contains(a.body, []byte("user=")) || bytes.Contains(a.body, []byte("dbname")) {
			t.Errorf("%s with the state cut off: %d %s", c.what, a.status, a.body)
		}
	}
	if trail := audit.String(); strings.Contains(trail, relay) {
		t.Errorf("the audit trail names the database's socket:\n%s", trail)
	}
	if !strings.Contains(log.String(), relay) {
		t.Errorf("the log does not say why:\n%s", log.String())
	}
}

// Replicas whose clocks disagree by far more than a lease still share one
// tenant's limits and sessions: leases are timed by the database's clock.
// r2's clock runs an hour ahead (it would take every other replica's
// lease for lapsed), r3's an hour behind (its renewals would look lapsed
// to the others).
func TestReplicasWithSkewedClocks(t *testing.T) {
	dsn := pgtest.Start(t)
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	keyFile := filepath.Join(t.TempDir(), "approval.key")
	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		t.Fatal(err)
	}
	gate, open := tiertest.ShellGate(t)
	gate.Tier, gate.Situation = "process", airlock.SituationInternal
	gate.Limits.WallMS = 30_000
	mutate := func(c *server.Config) {
		c.Tenants[0].MaxConcurrent = 2
		c.Tenants[0].ReadRoots = gate.Grants.FS.Read
		c.Tenants[0].Limits.Max.WallMS = 30_000
		c.MaxSessions = 2
	}
	r1 := startReplicaClock(t, dsn, "r1", keyFile, 0, mutate)
	r2 := startReplicaClock(t, dsn, "r2", keyFile, time.Hour, mutate)
	r3 := startReplicaClock(t, dsn, "r3", keyFile, -time.Hour, mutate)

	t.Run("sessions", func(t *testing.T) {
		var ids []string
		for _, r := range []*replica{r1, r3} {
			var opened struct{ ID string }
			a := rcall(t, "POST", r.url+"/v1/sessions", keyB, `{"tier":"starlark"}`)
			if err := json.Unmarshal(a.body, &opened); err != nil || opened.ID == "" {
				t.Fatalf("opening on %s: %d %s", r.name, a.status, a.body)
			}
			ids = append(ids, opened.ID)
		}
		if a := rcall(t, "POST", r2.url+"/v1/sessions", keyB, `{"tier":"starlark"}`); a.status != 429 {
			t.Errorf("a third session of a tenant limited to 2, on the replica ahead: %d %s", a.status, a.body)
		}
		for _, r := range []*replica{r2, r1} {
			for _, id := range ids {
				if a := rcall(t, "POST", r.url+"/v1/sessions/"+id+"/run", keyB, `{"kind":"starlark","code":"result = 1"}`); a.status != 200 {
					t.Errorf("session %s through %s: %d from %q: %s", id, r.name, a.status, a.replica, a.body)
				}
			}
		}
	})

	t.Run("runs in flight", func(t *testing.T) {
		if err := r1.srv.Router().Unavailable("process"); err != nil {
			tiertest.Unavailable(t, "process", err)
		}
		g1, g3 := startGated(t, r1.url, gate), startGated(t, r3.url, gate)
		a := rcall(t, "POST", r2.url+"/v1/run", keyA, `{"kind":"expr","code":"1"}`)
		open()
		for _, g := range []*gatedRun{g1, g3} {
			tiertest.CheckGated(t, g.finish(t))
		}
		if a.status != 429 {
			t.Errorf("a third run of a tenant limited to 2, on the replica ahead: %d %s", a.status, a.body)
		}
	})
}

// While the database is slow, the audit records waiting to be shipped to
// it stay within their budget in bytes: a tenant running large jobs
// cannot pile them up in the replica's memory. The records beyond it
// stay in the replica's own trail.
func TestShippingBoundedWhileTheStateIsSlow(t *testing.T) {
	const budget = 4 << 20
	defer server.SetShipBudget(budget)()
	dsn := pgtest.Start(t)
	r := startReplicas(t, dsn, 1)[0]
	// The records' table locked: every batch waits out its timeout.
	lockTables(t, dsn, "airlock_records")
	code := "result = 1\n# " + strings.Repeat("x", 600<<10)
	body, _ := json.Marshal(map[string]string{"kind": "starlark", "code": code})
	for i := range 16 {
		if a := rcall(t, "POST", r.url+"/v1/run", keyB, string(body)); a.status != 200 {
			t.Fatalf("run %d: %d %.300s", i, a.status, a.body)
		}
	}
	if q := r.srv.ShipQueued(); q > budget || q == 0 {
		t.Errorf("%d bytes of records wait to be shipped, want some, at most %d", q, budget)
	}
	if n := strings.Count(r.audit.String(), `"request":"run"`); n != 16 {
		t.Errorf("the trail has %d records of runs, want 16", n)
	}
}

// A request for approval crosses from the shared state to another
// replica once: looking it up again, as a tenant waiting for the decision
// does, does not read its job from the database again. A caller with no
// tenant's or approver's key does not make the database be asked at all.
func TestPendingReadOnce(t *testing.T) {
	dsn := pgtest.Start(t)
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	keyFile := filepath.Join(t.TempDir(), "approval.key")
	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		t.Fatal(err)
	}
	quiet := func(c *server.Config) {
		// Few janitor rounds while the bytes are counted.
		c.SessionLease = server.Duration(time.Minute)
	}
	rl := relayState(t, dsn)
	r1 := startReplica(t, dsn, "r1", keyFile, quiet)
	r2 := startReplica(t, rl.setting, "r2", keyFile, quiet)
	const size = 2 << 20
	body, _ := json.Marshal(map[string]string{"kind": "starlark", "situation": "internal", "code": "result = 1\n# " + strings.Repeat("x", size)})
	var req struct{ Digest string }
	a := rcall(t, "POST", r1.url+"/v1/approvals", keyA, string(body))
	if err := json.Unmarshal(a.body, &req); err != nil || req.Digest == "" {
		t.Fatalf("requesting approval on r1: %d %.300s", a.status, a.body)
	}
	if a := rcall(t, "GET", r2.url+"/v1/approvals/"+req.Digest, keyA, ""); a.status != 200 {
		t.Fatalf("r2 shows the request: %d %.300s", a.status, a.body)
	}
	got := rl.got.Load()
	for range 10 {
		if a := rcall(t, "GET", r2.url+"/v1/approvals/"+req.Digest+"/decision", keyA, ""); a.status != 200 || !bytes.Contains(a.body, []byte(`"pending"`)) {
			t.Fatalf("the decision on r2: %d %.300s", a.status, a.body)
		}
	}
	if n := rl.got.Load() - got; n > size/2 {
		t.Errorf("10 lookups of a request of %d bytes read %d bytes from the database", size, n)
	}
	sent := rl.sent.Load()
	for _, path := range []string{"", "/decision"} {
		for range 100 {
			if a := rcall(t, "GET", r2.url+"/v1/approvals/"+req.Digest+path, "not-a-key", ""); a.status != 404 {
				t.Fatalf("without a key: %d %.300s", a.status, a.body)
			}
		}
	}
	if n := rl.sent.Load() - sent; n > 8<<10 {
		t.Errorf("200 lookups without a key sent %d bytes to the database", n)
	}
}

// The requests a tenant made on other replicas count toward the bounds
// a replica keeps them within: asked up to the limit on each of two
// replicas, one replica keeps no more than the limit of them.
func TestPendingBoundedAcrossReplicas(t *testing.T) {
	rs := startReplicas(t, pgtest.Start(t), 2)
	for _, r := range rs {
		for i := range server.MaxPendingPerTenant {
			job := fmt.Sprintf(`{"kind":"starlark","situation":"internal","code":"result = %d # %s"}`, i, r.name)
			if a := rcall(t, "POST", r.url+"/v1/approvals", keyA, job); a.status != 200 {
				t.Fatalf("request %d on %s: %d %s", i, r.name, a.status, a.body)
			}
		}
	}
	var listed []struct{ Digest string }
	a := rcall(t, "GET", rs[1].url+"/v1/approvals", keyA, "")
	if err := json.Unmarshal(a.body, &listed); err != nil {
		t.Fatalf("listing on r2: %d %.300s", a.status, a.body)
	}
	if len(listed) != server.MaxPendingPerTenant {
		t.Errorf("r2 keeps %d requests of the tenant, want its limit %d", len(listed), server.MaxPendingPerTenant)
	}
}

// The shared records keep what GET /v1/audit lists (a tenant's newest
// 256), not every run a tenant ever made: the trails are the full record.
func TestSharedRecordsTrimmed(t *testing.T) {
	dsn := pgtest.Start(t)
	r := startReplicas(t, dsn, 1)[0]
	const runs, keep = 300, 256
	for i := range runs {
		if a := rcall(t, "POST", r.url+"/v1/run", keyA, `{"kind":"expr","code":"1"}`); a.status != 200 {
			t.Fatalf("run %d: %d %s", i, a.status, a.body)
		}
	}
	ctx := context.Background()
	conn := pgtest.Conn(t, dsn)
	// Every run's record shipped (the newest's id is the count of records
	// ever added: these runs are the database's only ones), and the
	// older ones trimmed.
	var n, newest int
	for i := 0; ; i++ {
		if err := conn.QueryRow(ctx, `SELECT count(*), coalesce(max(id), 0) FROM airlock_records WHERE tenant = 'a'`).Scan(&n, &newest); err != nil {
			t.Fatal(err)
		}
		if newest == runs && n == keep {
			break
		}
		if i == 200 {
			t.Fatalf("the database keeps %d records of the tenant's %d runs (%d shipped), want its newest %d", n, runs, newest, keep)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var recs []server.Record
	a := rcall(t, "GET", r.url+"/v1/audit", keyA, "")
	if err := json.Unmarshal(a.body, &recs); err != nil || len(recs) != keep {
		t.Fatalf("the listing: %d records, %v", len(recs), err)
	}
}

// Approval requests leave the database once expired (with a margin for
// replicas whose clocks lag): a tenant asking for approvals over days
// does not fill it.
func TestPendingForgotten(t *testing.T) {
	dsn := pgtest.Start(t)
	r := startReplicas(t, dsn, 1, func(c *server.Config) { c.Approvals.TTL = server.Duration(time.Second) })[0]
	if a := rcall(t, "POST", r.url+"/v1/approvals", keyA, `{"kind":"starlark","situation":"internal","code":"result = 1"}`); a.status != 200 {
		t.Fatalf("requesting approval: %d %s", a.status, a.body)
	}
	ctx := context.Background()
	conn := pgtest.Conn(t, dsn)
	var n int
	for i := 0; ; i++ {
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM airlock_pending`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if i == 0 && n != 1 {
			t.Fatalf("%d requests in the database, want the one asked", n)
		}
		if n == 0 {
			break
		}
		if i == 200 {
			t.Fatalf("the request is still in the database 10 s after it expired")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// While the database is slow, a tenant's runs waiting for the same
// lease of its quota (or hold of its run slots) are refused together
// once one call timed out: not one timeout after another, each asking
// the database again.
func TestSlowStateRefusedOnce(t *testing.T) {
	dsn := pgtest.Start(t)
	rl := relayState(t, dsn)
	for _, c := range []struct {
		what, word, lock string
		mutate           func(*server.Config)
	}{
		{"the run quota", "airlock_bucket", `SELECT 1 FROM airlock_bucket WHERE tenant = 'b' FOR UPDATE`,
			func(c *server.Config) { c.Tenants[1].RunsPerMinute, c.Tenants[1].MaxConcurrent = 40, 0 }},
		{"the run slots", "airlock_slots", `SELECT pg_advisory_xact_lock(hashtextextended('airlock_slots/b', 0))`,
			func(c *server.Config) { c.Tenants[1].MaxConcurrent = 8 }},
	} {
		t.Run(c.what, func(t *testing.T) {
			key := make([]byte, 32)
			_, _ = rand.Read(key)
			keyFile := filepath.Join(t.TempDir(), "approval.key")
			if err := os.WriteFile(keyFile, key, 0o600); err != nil {
				t.Fatal(err)
			}
			r := startReplica(t, rl.setting, "r1", keyFile, c.mutate, func(c *server.Config) {
				// No janitor round while the statements are counted.
				c.SessionLease, c.SessionTTL = server.Duration(time.Hour), server.Duration(time.Hour)
			})
			// The rows exist (one run took a lease and a slot), the run
			// leased is spent and the slot given back as idle; then the
			// rows are locked: every call waits out its timeout.
			if a := rcall(t, "POST", r.url+"/v1/run", keyB, `{"kind":"expr","code":"1"}`); a.status != 200 {
				t.Fatalf("a run: %d %s", a.status, a.body)
			}
			ctx := context.Background()
			conn := pgtest.Conn(t, dsn)
			for i := 0; ; i++ {
				var held int
				if err := conn.QueryRow(ctx, `SELECT coalesce(sum(held), 0)::int FROM airlock_slots WHERE tenant = 'b'`).Scan(&held); err != nil {
					t.Fatal(err)
				}
				if held == 0 {
					break
				}
				if i == 200 {
					t.Fatalf("the replica still holds %d idle slots", held)
				}
				time.Sleep(50 * time.Millisecond)
			}
			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			if _, err := tx.Exec(ctx, c.lock); err != nil {
				t.Fatal(err)
			}
			rl.count(c.word)
			var wg sync.WaitGroup
			for range 6 {
				wg.Go(func() {
					if a := rcall(t, "POST", r.url+"/v1/run", keyB, `{"kind":"expr","code":"1"}`); a.status != 503 {
						t.Errorf("a run while %s waits: %d %s", c.what, a.status, a.body)
					}
				})
			}
			wg.Wait()
			if n := rl.executed(c.word); n > 2 {
				t.Errorf("6 runs asked the database %d times for %s", n, c.what)
			}
		})
	}
}

// A registry row naming a replica that does not hold its session (its
// drop reached the database after the replica gave up waiting, or its
// registration did) lapses: renewed with the replica's sessions, it would
// count toward its tenant's sessions on every replica for good. The
// replica's own sessions stay renewed.
func TestUnheldSessionRowsLapse(t *testing.T) {
	dsn := pgtest.Start(t)
	r := startReplicas(t, dsn, 1)[0] // its lease: 1 s, renewed every third of it
	var opened struct{ ID string }
	a := rcall(t, "POST", r.url+"/v1/sessions", keyB, `{"tier":"starlark"}`)
	if err := json.Unmarshal(a.body, &opened); err != nil || opened.ID == "" {
		t.Fatalf("opening: %d %s", a.status, a.body)
	}
	ctx := context.Background()
	conn := pgtest.Conn(t, dsn)
	const stray = "s-00000000000000000000000000000001"
	if _, err := conn.Exec(ctx, `INSERT INTO airlock_sessions (id, tenant, tier, replica, addr, lease_until)
		VALUES ($1, 'b', 'starlark', 'r1', $2, now() + interval '1 second')`, stray, r.url); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		var lapsed, live bool
		if err := conn.QueryRow(ctx, `SELECT
			(SELECT lease_until < now() FROM airlock_sessions WHERE id = $1),
			(SELECT lease_until > now() FROM airlock_sessions WHERE id = $2)`, stray, opened.ID).Scan(&lapsed, &live); err != nil {
			t.Fatal(err)
		}
		if !live {
			t.Fatalf("the replica's own session lapsed")
		}
		if lapsed {
			break
		}
		if i == 100 {
			t.Fatalf("the row of a session the replica does not hold is still renewed after 5 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if a := rcall(t, "POST", r.url+"/v1/sessions/"+opened.ID+"/run", keyB, `{"kind":"starlark","code":"result = 1"}`); a.status != 200 {
		t.Fatalf("the session: %d %s", a.status, a.body)
	}
}

// Two replicas under one id would take each other's run slots and
// sessions for their own: the second refuses to start while the first
// holds the id, and starts once it gave the id back.
func TestReplicaIDInUse(t *testing.T) {
	dsn := pgtest.Start(t)
	rs := startReplicas(t, dsn, 1)
	cfg := testConfig()
	cfg.State, cfg.ReplicaID, cfg.Advertise = dsn, rs[0].name, "http://127.0.0.1:1"
	srv, err := newServer(cfg, server.Options{Audit: io.Discard})
	if err == nil {
		srv.Close()
		t.Fatal("a second replica started under the id of a live one")
	}
	if !strings.Contains(err.Error(), "replica_id") || !strings.Contains(err.Error(), rs[0].url) {
		t.Errorf("the refusal does not say which setting, nor who holds the id: %v", err)
	}
	_ = rs[0].hs.Close()
	<-rs[0].done
	if err := rs[0].srv.Close(); err != nil {
		t.Fatal(err)
	}
	srv, err = newServer(cfg, server.Options{Audit: io.Discard})
	if err != nil {
		t.Fatalf("starting once the id was given back: %v", err)
	}
	srv.Close()
}

// A replica that closes while the database does not answer gives up on
// telling it the rest (sessions closed, slots given back, records
// queued) within one budget, rather than one timeout per session: what
// it could not tell lapses with its lease, and its own trail keeps every
// record.
func TestCloseBoundedWhileTheStateIsSlow(t *testing.T) {
	dsn := pgtest.Start(t)
	r := startReplicas(t, dsn, 1)[0]
	const sessions = 12
	for i := range sessions {
		if a := rcall(t, "POST", r.url+"/v1/sessions", keyB, `{"tier":"starlark"}`); a.status != 201 && a.status != 200 {
			t.Fatalf("session %d: %d %.300s", i, a.status, a.body)
		}
	}
	if a := rcall(t, "POST", r.url+"/v1/run", keyB, `{"kind":"expr","code":"1"}`); a.status != 200 {
		t.Fatalf("run: %d %.300s", a.status, a.body)
	}
	// Every table the closing replica writes is locked: each statement
	// waits out its timeout.
	lockTables(t, dsn, "airlock_sessions", "airlock_records", "airlock_replicas", "airlock_slots", "airlock_quota")
	start := time.Now()
	_ = r.srv.Close()
	// One budget (10 s) and what the tiers take to close, against the
	// 60 s and more of one 5 s timeout per session.
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("closing took %v with %d sessions to unregister", took, sessions)
	}
}

// lockTables holds tables of the shared state locked until the test ends,
// as a database that does not answer: every statement on them waits out
// its timeout.
func lockTables(t *testing.T, dsn string, tables ...string) {
	t.Helper()
	ctx := context.Background()
	tx, err := pgtest.Conn(t, dsn).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	if _, err := tx.Exec(ctx, "LOCK TABLE "+strings.Join(tables, ", ")+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
}
