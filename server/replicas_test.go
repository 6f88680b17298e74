package server_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/state"
	"github.com/airlock-sandbox/airlock/internal/testing/pgtest"
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
	rs := startReplicas(t, dsn, 3, func(c *server.Config) {
		c.Tenants[1].RunsPerMinute = 30
		c.Tenants[1].MaxConcurrent = 8
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
		if a := rcall(t, "POST", rs[1].url+"/v1/run", keyA, job, server.ApprovalHeader, tok.Token); a.status != 200 {
			t.Fatalf("the first redemption, on r2: %d %s", a.status, a.body)
		}
		for _, r := range []*replica{rs[2], rs[0], rs[1]} {
			a := rcall(t, "POST", r.url+"/v1/run", keyA, job, server.ApprovalHeader, tok.Token)
			if a.status == 200 || !bytes.Contains(a.body, []byte("already redeemed")) {
				t.Errorf("the token again, on %s: %d %s", r.name, a.status, a.body)
			}
		}
	})

	t.Run("the rate quota holds across replicas", func(t *testing.T) {
		// No minute admits more than the budget; a replica may refuse
		// while at most batch-1 runs sit leased on each other one.
		const limit, batch = 30, 3
		for attempt := 0; ; attempt++ {
			start := state.Window(time.Now())
			ok := 0
			for i := range 2 * limit {
				a := rcall(t, "POST", rs[i%3].url+"/v1/run", keyB, `{"kind":"expr","code":"1+1"}`)
				switch a.status {
				case 200:
					ok++
				case 429:
				default:
					t.Fatalf("run %d: %d %s", i, a.status, a.body)
				}
			}
			if !state.Window(time.Now()).Equal(start) {
				// A new minute brought a new budget mid-way: measure again
				// (the next minute's budget is barely touched).
				if attempt == 2 {
					t.Fatal("three attempts crossed a minute's boundary")
				}
				continue
			}
			if ok > limit || ok < limit-2*(batch-1) {
				t.Fatalf("%d of %d runs admitted within one minute, want %d (tolerance %d)", ok, 2*limit, limit, 2*(batch-1))
			}
			return
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

	t.Run("a draining replica finishes what it accepted", func(t *testing.T) {
		r := rs[2]
		const n = 4
		type outcome struct {
			status int
			body   []byte
			err    error
		}
		results := make(chan outcome, n)
		for range n {
			go func() {
				req, _ := http.NewRequest("POST", r.url+"/v1/run", strings.NewReader(
					`{"kind":"starlark","code":"n = 0\nfor i in range(3000000):\n    n += 1\nresult = n","limits":{"steps":40000000}}`))
				req.Header.Set("Authorization", "Bearer "+keyA)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					results <- outcome{err: err}
					return
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				results <- outcome{status: resp.StatusCode, body: body}
			}()
		}
		// Drain once every run is executing.
		for i := 0; ; i++ {
			a := rcall(t, "GET", r.url+"/metrics", keyA, "")
			if bytes.Contains(a.body, []byte(fmt.Sprintf("airlock_runs_in_flight %d\n", n))) {
				break
			}
			if i == 500 {
				t.Fatalf("the runs never all started: %s", a.body)
			}
			time.Sleep(10 * time.Millisecond)
		}
		var wg sync.WaitGroup
		wg.Go(func() {
			if err := r.srv.Shutdown(r.hs); err != nil {
				t.Errorf("shutdown: %v", err)
			}
		})
		for range n {
			o := <-results
			if o.err != nil || o.status != 200 || !bytes.Contains(o.body, []byte(`"value":3000000`)) {
				t.Errorf("an accepted run was lost in the drain: %v %d %s", o.err, o.status, o.body)
			}
		}
		wg.Wait()
		<-r.done
		if resp, err := http.Get(r.url + "/healthz"); err == nil {
			resp.Body.Close()
			t.Error("the drained replica still answers")
		}
		if a := rcall(t, "POST", rs[1].url+"/v1/run", keyA, `{"kind":"expr","code":"1"}`); a.status != 200 {
			t.Errorf("r2 after r3 drained: %d %s", a.status, a.body)
		}
	})
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
