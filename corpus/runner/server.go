package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/approve"
	"github.com/airlock-sandbox/airlock/corpus/runner/gatewaylab"
	"github.com/airlock-sandbox/airlock/server"
	"io"
	"net/http"
)

// ServerTier is the pseudo-tier the server cases (corpus/server.jsonl) are
// written for: the real HTTP API on loopback, as the tenant that file
// describes, each job posted to POST /v1/run.
const ServerTier = "server"

// serverKey is the corpus tenant's API key (the server keeps only its
// SHA-256).
const serverKey = "corpus-tenant-key-0123456789abcdef"

// ServerConfig is the server the server cases run against: one tenant
// allowed the situations expression, public and internal and the tiers
// expr and starlark, with approvals required for internal Starlark jobs.
func ServerConfig() server.Config {
	tenant := CorpusTenant("corpus")
	tenant.Situations = []airlock.Situation{airlock.SituationExpression, airlock.SituationPublic, airlock.SituationInternal}
	tenant.Tiers = []string{"expr", "starlark"}
	return server.Config{
		Approvals: &server.Approvals{
			Rules: &[]approve.Rule{{Name: "internal-starlark", Kinds: []airlock.Kind{airlock.KindStarlark}, Situations: []airlock.Situation{airlock.SituationInternal}}},
		},
		Tenants: []server.Tenant{tenant},
	}
}

// ServerSource is a server pseudo-tier named name: the HTTP API on
// loopback serving cfg, whose tenants must include the corpus tenant's key
// (see [ServerConfig]), over the tiers that tiers builds for it.
func ServerSource(name string, cfg func() server.Config, tiers func(server.Config) ([]airlock.Tier, error)) TierSource {
	return TierSource{Name: name, New: func() (airlock.Tier, error) {
		c := cfg()
		ts, err := tiers(c)
		if err != nil {
			return nil, err
		}
		srv, err := server.New(c, ts, server.Options{Audit: io.Discard})
		if err != nil {
			for _, t := range ts {
				closeTier(t)
			}
			return nil, err
		}
		hs, err := gatewaylab.Serve(srv.Handler(), nil)
		if err != nil {
			srv.Close()
			return nil, err
		}
		return &serverTier{name: name, srv: srv, http: hs, client: &http.Client{Transport: &http.Transport{}}}, nil
	}}
}

// CorpusTenant returns the corpus tenant's entry with a name, for
// configurations other than [ServerConfig].
func CorpusTenant(name string) server.Tenant {
	return server.Tenant{Name: name, KeySHA256: server.HashKey(serverKey), MaxConcurrent: 2}
}

type serverTier struct {
	name   string
	srv    *server.Server
	http   *gatewaylab.Server
	client *http.Client
}

func (s *serverTier) Name() string { return s.name }

// Level is that of the strongest tier the tenant may use; the API's own
// checks are what the cases test.
func (*serverTier) Level() airlock.Level { return airlock.LevelInterpreter }

// Admit takes every job: refusing is the server's job, and the cases'.
func (*serverTier) Admit(airlock.Job) error { return nil }

func (s *serverTier) Run(ctx context.Context, job airlock.Job) (airlock.Result, error) {
	body, err := json.Marshal(job)
	if err != nil {
		return airlock.Result{}, err
	}
	req, err := http.NewRequestWithContext(ctx, "POST", s.http.URL+"/v1/run", bytes.NewReader(body))
	if err != nil {
		return airlock.Result{}, err
	}
	req.Header.Set("Authorization", "Bearer "+serverKey)
	resp, err := s.client.Do(req)
	if err != nil {
		return airlock.Result{}, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return airlock.Result{}, err
	}
	var res airlock.Result
	if err := json.Unmarshal(data, &res); err != nil || resp.StatusCode >= 500 {
		return res, fmt.Errorf("server: status %d: %.300s", resp.StatusCode, data)
	}
	return res, res.Err()
}

func (s *serverTier) Close() error {
	s.http.Close()
	s.client.CloseIdleConnections()
	return s.srv.Close()
}

func isServer(t airlock.Tier) bool {
	_, ok := t.(*serverTier)
	return ok
}
