package server_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/internal/testing/tiertest"
	"github.com/airlock-sandbox/airlock/internal/tierset"
	"github.com/airlock-sandbox/airlock/server"
)

// httpGate is a loopback origin, pinned as gate.test, whose /gate answers
// only once open has been called: a Starlark job granted the host prints,
// then waits in http.get for the test.
type httpGate struct {
	pins egress.Hosts
	rule airlock.NetRule
	url  string
	once sync.Once
	ch   chan struct{}
}

func startGate(t *testing.T) *httpGate {
	t.Helper()
	g := &httpGate{pins: egress.Hosts{}, ch: make(chan struct{})}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-g.ch:
			_, _ = w.Write([]byte("open"))
		case <-r.Context().Done():
		case <-time.After(30 * time.Second): // bounded: the job then fails its check
			http.Error(w, "never opened", http.StatusGatewayTimeout)
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(g.open) // before srv.Close: a waiting handler returns
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	if err := g.pins.Add("gate.test", netip.MustParseAddr("127.0.0.1")); err != nil {
		t.Fatal(err)
	}
	p, _ := strconv.Atoi(port)
	g.rule = airlock.NetRule{Host: "gate.test", Ports: []int{p}}
	g.url = "http://gate.test:" + port + "/gate"
	return g
}

func (g *httpGate) open() { g.once.Do(func() { close(g.ch) }) }

// openSession opens a session of tenant a on tier.
func (f *fixture) openSession(tier string) string {
	f.t.Helper()
	var o struct{ ID, Tier string }
	r := f.do("POST", "/v1/sessions", keyA, `{"tier":"`+tier+`"}`)
	r.decode(f.t, &o)
	if r.status != http.StatusCreated || o.ID == "" || o.Tier != tier {
		f.t.Fatalf("opening a %s session: %d %s", tier, r.status, r.body)
	}
	f.t.Cleanup(func() { f.do("DELETE", "/v1/sessions/"+o.ID, keyA, nil) })
	return o.ID
}

// TestSessionRunStreams: POST /v1/sessions/{id}/run with Accept ndjson or
// SSE streams as POST /v1/run does: on the process tier a shell job
// prints, then waits for a file the test creates only once it has read
// the first line; on the Starlark tier the script prints, then waits in
// an HTTP request the test answers only then. Each run keeps the
// session's state, and is audited as a session run.
func TestSessionRunStreams(t *testing.T) {
	for _, format := range []string{"application/x-ndjson", "text/event-stream"} {
		t.Run("process/"+format, func(t *testing.T) {
			job, open := tiertest.ShellGate(t)
			job.Situation = airlock.SituationInternal
			job.Limits.WallMS = 30_000
			f := newFixture(t, func(c *server.Config) {
				c.Tenants[0].ReadRoots = job.Grants.FS.Read
				c.Tenants[0].Limits.Max.WallMS = 60_000
			})
			if err := f.srv.Router().Unavailable("process"); err != nil {
				tiertest.Unavailable(t, "process", err)
			}
			id := f.openSession("process")
			// The script leaves a file in the session's scratch; a later
			// run of the session reads it.
			job.Argv[2] += "; echo kept > note"
			res := postStreamed(t, f, "/v1/sessions/"+id+"/run", job, format, "first\n", open)
			tiertest.CheckGated(t, res)
			if res.Tier != "process" {
				t.Fatalf("ran on %s", res.Tier)
			}
			next := f.do("POST", "/v1/sessions/"+id+"/run", keyA, airlock.Job{Kind: airlock.KindCommand, Argv: []string{"cat", "note"}, Situation: airlock.SituationInternal})
			if res := next.result(t); res.Stdout != "kept\n" {
				t.Fatalf("the session's next run: %d %s", next.status, next.body)
			}
			checkSessionAudit(t, f, id)
		})
		t.Run("starlark/"+format, func(t *testing.T) {
			gate := startGate(t)
			// Starlark with the network is not hermetic: only the
			// expression situation lets the interpreter run it.
			f := newFixtureTiers(t, tierset.Options{Egress: egress.Config{Hosts: gate.pins}}, func(c *server.Config) {
				c.Tenants[0].Situations = append(c.Tenants[0].Situations, airlock.SituationExpression)
			})
			id := f.openSession("starlark")
			if r := f.do("POST", "/v1/sessions/"+id+"/run", keyA, airlock.Job{Kind: airlock.KindStarlark, Code: "kept = 41"}); r.status != http.StatusOK {
				t.Fatalf("the session's first run: %d %s", r.status, r.body)
			}
			job := airlock.Job{Kind: airlock.KindStarlark, Code: "print('first')\nr = http.get('" + gate.url + "')\nprint(r.body, kept + 1)"}
			job.Grants.Net, job.Situation = []airlock.NetRule{gate.rule}, airlock.SituationExpression
			res := postStreamed(t, f, "/v1/sessions/"+id+"/run", job, format, "first\n", gate.open)
			if res.Tier != "starlark" || res.Stdout != "first\nopen 42\n" || res.Error != nil {
				t.Fatalf("the streamed session run: %+v", res)
			}
			checkSessionAudit(t, f, id)
		})
	}
}

// checkSessionAudit checks that the trail's last record is an ok run of
// session id.
func checkSessionAudit(t *testing.T, f *fixture, id string) {
	t.Helper()
	lines := f.audit.Lines()
	var rec server.Record
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Request != "session_run" || rec.Session != id || rec.Outcome != "ok" {
		t.Fatalf("audit: %s", lines[len(lines)-1])
	}
}

// TestSessionRunStreamRefused: a session run refused before it reaches
// the tier is answered as without streaming: its status and a JSON
// error.
func TestSessionRunStreamRefused(t *testing.T) {
	f := newFixture(t)
	id := f.openSession("starlark")
	for _, c := range []struct {
		name   string
		job    airlock.Job
		status int
		kind   string
	}{
		{"another tier", airlock.Job{Kind: airlock.KindStarlark, Code: "print(1)", Tier: "wasm"}, http.StatusBadRequest, `"invalid"`},
		{"held for approval", airlock.Job{Kind: airlock.KindStarlark, Code: "print(1)", Situation: airlock.SituationInternal}, http.StatusForbidden, `"not_admitted"`},
	} {
		r := f.do("POST", "/v1/sessions/"+id+"/run", keyA, c.job, "Accept", "application/x-ndjson")
		if r.status != c.status || !strings.HasPrefix(r.header.Get("Content-Type"), "application/json") || !strings.Contains(string(r.body), c.kind) {
			t.Errorf("%s: %d %q %s", c.name, r.status, r.header.Get("Content-Type"), r.body)
		}
	}
}

// TestMCPSessionProgress: run_in_session, called over streamable HTTP
// with a progress token, sends the program's output in progress
// notifications while it runs: the script prints, then waits for a file
// the client's progress handler writes into the session's scratch once
// it has seen the first line.
func TestMCPSessionProgress(t *testing.T) {
	f := newFixture(t, func(c *server.Config) {
		c.Tenants[0].Situation = airlock.SituationInternal // the router picks the process tier for its commands
		c.Tenants[0].Limits.Max.WallMS = 60_000
	})
	if err := f.srv.Router().Unavailable("process"); err != nil {
		tiertest.Unavailable(t, "process", err)
	}
	var (
		mu     sync.Mutex
		got    strings.Builder
		gate   string // the gate file's path, once the session is open
		opened bool
	)
	onProgress := func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
		mu.Lock()
		defer mu.Unlock()
		got.WriteString(req.Params.Message)
		if !opened && gate != "" && strings.Contains(got.String(), "first\n") {
			opened = true
			if err := os.WriteFile(gate, nil, 0o644); err != nil {
				t.Error(err)
			}
		}
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "test"}, &mcp.ClientOptions{ProgressNotificationHandler: onProgress})
	ctx := context.Background()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: f.http.URL + "/mcp", HTTPClient: &http.Client{Transport: bearerTransport{keyA}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })

	res, _ := call(t, cs, "open_session", map[string]any{"ttl_seconds": 60})
	var o struct{ Session, Tier string }
	data, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(data, &o); err != nil || res.IsError || o.Tier != "process" {
		t.Fatalf("open_session: %s %s", data, text(res))
	}
	defer call(t, cs, "close_session", map[string]any{"session": o.Session})
	dir := f.srv.SessionDir(o.Session)
	if dir == "" {
		t.Fatal("the process session has no scratch directory")
	}
	mu.Lock()
	gate = filepath.Join(dir, "gate")
	mu.Unlock()

	script := `echo first; i=0; while [ ! -e gate ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; if [ -e gate ]; then echo second; else echo never opened; fi`
	params := &mcp.CallToolParams{Name: "run_in_session", Arguments: map[string]any{"session": o.Session, "argv": []string{"sh", "-c", script}, "wall_ms": 40_000}}
	params.SetProgressToken("session-run")
	res, err = cs.CallTool(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	var out server.ToolOutput
	data, _ = json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(data, &out); err != nil || res.IsError || string(out.Stdout) != "first\nsecond\n" || out.ExitCode == nil || *out.ExitCode != 0 {
		t.Fatalf("run_in_session: %s %s", data, text(res))
	}
	mu.Lock()
	defer mu.Unlock()
	if !opened {
		t.Fatalf("the run ended before its first line came as progress (progress so far %q)", got.String())
	}
}
