package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/approve"
	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/internal/testing/syncbuf"
	"github.com/airlock-sandbox/airlock/internal/tierset"
	"github.com/airlock-sandbox/airlock/server"
)

// Keys of the test tenants. They are plain strings here; the server only
// ever sees their SHA-256.
const (
	keyA        = "test-key-tenant-a-0123456789abcdef"
	keyB        = "test-key-tenant-b-0123456789abcdef"
	keyApprover = "test-key-approver-a-0123456789abcd"
)

// clock is a settable clock for approval expiry.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func testConfig() server.Config {
	t := true
	return server.Config{
		SessionTTL: server.Duration(time.Minute),
		QueueWait:  server.Duration(50 * time.Millisecond),
		Approvals: &server.Approvals{
			TTL: server.Duration(time.Minute),
			// Commands are not available in every build: internal
			// Starlark jobs stand in for "a job that needs approval".
			Rules: &[]approve.Rule{{Name: "internal-starlark", Kinds: []airlock.Kind{airlock.KindStarlark}, Situations: []airlock.Situation{airlock.SituationInternal}}, {Name: "command-with-network", Kinds: []airlock.Kind{airlock.KindCommand}, Net: &t}},
		},
		Tenants: []server.Tenant{
			// Its MCP shell scripts run other programs: they need spawn.
			{Name: "a", KeySHA256: server.HashKey(keyA), ApproverSHA256: []string{server.HashKey(keyApprover)}, MaxConcurrent: 8, MCPSpawn: true,
				Situations: []airlock.Situation{airlock.SituationPublic, airlock.SituationInternal},
				Limits:     &server.LimitPolicy{Max: airlock.Limits{WallMS: 5000, Steps: 50_000_000}}},
			{Name: "b", KeySHA256: server.HashKey(keyB), MaxConcurrent: 2, Situations: []airlock.Situation{airlock.SituationExpression, airlock.SituationPublic, airlock.SituationInternal}, Tiers: []string{"expr", "starlark"}},
		},
	}
}

type fixture struct {
	t     *testing.T
	srv   *server.Server
	http  *httptest.Server
	audit *syncbuf.Buffer
	clock *clock
}

func newFixture(t *testing.T, mutate ...func(*server.Config)) *fixture {
	t.Helper()
	return newFixtureTiers(t, tierset.Options{}, mutate...)
}

// newFixtureTiers is newFixture over tiers built with topts (their
// limits are the configuration's).
func newFixtureTiers(t *testing.T, topts tierset.Options, mutate ...func(*server.Config)) *fixture {
	t.Helper()
	cfg := testConfig()
	for _, m := range mutate {
		m(&cfg)
	}
	f := &fixture{t: t, audit: &syncbuf.Buffer{}, clock: &clock{t: time.Now()}}
	srv, err := newServerTiers(cfg, topts, server.Options{Audit: f.audit, Now: f.clock.now})
	if err != nil {
		t.Fatal(err)
	}
	f.srv = srv
	f.http = httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		f.http.Close()
		if err := srv.Close(); err != nil {
			t.Errorf("closing the server: %v", err)
		}
	})
	return f
}

type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) result(t *testing.T) airlock.Result {
	t.Helper()
	var res airlock.Result
	if err := json.Unmarshal(r.body, &res); err != nil {
		t.Fatalf("status %d, body is not a result: %v: %s", r.status, err, r.body)
	}
	return res
}

func (r reply) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("status %d: %v: %s", r.status, err, r.body)
	}
}

func (f *fixture) do(method, path, key string, body any, header ...string) reply {
	f.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			f.t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, f.http.URL+path, rd)
	if err != nil {
		f.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := f.http.Client().Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatal(err)
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: data}
}

// httpTier is a client of POST /v1/run: it lets the corpus run its cases
// against the real server over loopback.
type httpTier struct {
	f   *fixture
	key string
}

func (h httpTier) Name() string                { return "server" }
func (h httpTier) Level() airlock.Level        { return airlock.LevelInterpreter }
func (h httpTier) Admit(job airlock.Job) error { return nil }
func (h httpTier) Run(ctx context.Context, job airlock.Job) (airlock.Result, error) {
	r := h.f.do("POST", "/v1/run", h.key, job)
	var res airlock.Result
	if err := json.Unmarshal(r.body, &res); err != nil {
		return res, err
	}
	if r.status >= 500 {
		h.f.t.Errorf("status %d for %s", r.status, r.body)
	}
	return res, res.Err()
}

// newServer builds a server over the airlock command's tiers, built with
// cfg's limits as `airlock serve` builds them. The server closes them, or
// newServer does when New fails.
func newServer(cfg server.Config, opts server.Options) (*server.Server, error) {
	return newServerTiers(cfg, tierset.Options{}, opts)
}

// storeFixture serves cfg over tiers built with the image store st (and
// topts), the server given the store; both close when the test ends.
func storeFixture(t *testing.T, cfg server.Config, st *image.Store, topts tierset.Options) *fixture {
	t.Helper()
	topts.Images = st
	srv, err := newServerTiers(cfg, topts, server.Options{Images: st, Audit: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, srv: srv, http: httptest.NewServer(srv.Handler())}
	t.Cleanup(func() {
		f.http.Close()
		if err := srv.Close(); err != nil {
			t.Errorf("closing the server: %v", err)
		}
	})
	return f
}

func newServerTiers(cfg server.Config, topts tierset.Options, opts server.Options) (*server.Server, error) {
	topts.Limits = cfg.TierLimits()
	tiers, err := tierset.Build(topts)
	if err != nil {
		return nil, err
	}
	srv, err := server.New(cfg, tiers, opts)
	if err != nil {
		_ = tierset.Close(tiers)
		return nil, err
	}
	return srv, nil
}
