// Package runnertest holds deliberately weakened tiers that prove the
// corpus runner catches escapes. They are for tests only: the airlock
// binary never offers them.
package runnertest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	exprlang "github.com/expr-lang/expr"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/approve"
	"github.com/airlock-sandbox/airlock/corpus"
	"github.com/airlock-sandbox/airlock/corpus/runner"
	"github.com/airlock-sandbox/airlock/corpus/runner/gatewaylab"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/internal/tierset"
	"github.com/airlock-sandbox/airlock/server"
)

// The weakened tiers' names.
const (
	Plain = "plain-expr" // expr-lang/expr with none of airlock's hardening
	Leaky = "leaky-expr" // plain expr-lang handed the host: environment, files, network
	Hang  = "hang"       // never returns and ignores cancellation
	Down  = "down"       // reports itself unavailable
)

// TierSources are the airlock command's tiers, built with the default
// settings, and the server pseudo-tier over them, as the runner takes
// them.
func TierSources() []runner.TierSource {
	var out []runner.TierSource
	for _, e := range tierset.Entries() {
		out = append(out, runner.TierSource{Name: e.Name, New: func() (airlock.Tier, error) { return e.New(tierset.Options{}) }})
	}
	return append(out, runner.ServerSource(runner.ServerTier, runner.ServerConfig, ServerTiers))
}

// ServerTiers builds the airlock command's tiers for a server of cfg, as
// `airlock serve` does.
func ServerTiers(cfg server.Config) ([]airlock.Tier, error) {
	return tierset.Build(tierset.Options{Limits: cfg.TierLimits()})
}

// Sources returns the weakened tiers.
func Sources() []runner.TierSource {
	mk := func(name string, t airlock.Tier) runner.TierSource {
		return runner.TierSource{Name: name, New: func() (airlock.Tier, error) { return t, nil }}
	}
	return []runner.TierSource{
		mk(Plain, &exprTier{name: Plain}),
		mk(Leaky, &exprTier{name: Leaky, leaky: true}),
		mk(Hang, hangTier{}),
		mk(Down, downTier{}),
		UncheckedSource(),
		runner.ServerSource(ServerOpen, func() server.Config {
			none := []approve.Rule{}
			open := runner.CorpusTenant("open")
			open.Situations = []airlock.Situation{airlock.SituationPublic, airlock.SituationInternal}
			return server.Config{Tenants: []server.Tenant{open}, Approvals: &server.Approvals{Rules: &none}}
		}, ServerTiers),
	}
}

// exprTier runs an expression with expr-lang/expr as it comes: no size or
// nesting bound, no memory budget, no step budget. The leaky variant also
// offers the host to the expression, as a careless embedding would.
type exprTier struct {
	name  string
	leaky bool
}

func (t *exprTier) Name() string         { return t.name }
func (t *exprTier) Level() airlock.Level { return airlock.LevelInterpreter }
func (t *exprTier) Admit(job airlock.Job) error {
	if job.Kind != airlock.KindExpr {
		return &airlock.NotAdmitted{Tier: t.name, Reason: "runs only expressions"}
	}
	return nil
}

func (t *exprTier) Run(ctx context.Context, job airlock.Job) (airlock.Result, error) {
	res := airlock.Result{Tier: t.name, Level: airlock.LevelInterpreter}
	env := map[string]any{}
	for k, v := range job.Input {
		env[k] = v
	}
	if t.leaky {
		host := map[string]any{}
		for _, kv := range os.Environ() {
			k, v, _ := strings.Cut(kv, "=")
			host[k] = v
		}
		env["env"] = host
		env["readFile"] = func(p string) string { b, _ := os.ReadFile(p); return string(b) }
		env["fetch"] = func(url string) string {
			c := http.Client{Timeout: 5 * time.Second}
			r, err := c.Get(url)
			if err != nil {
				return err.Error()
			}
			_ = r.Body.Close()
			return r.Status
		}
		env["lookup"] = func(host, server string) string {
			r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, "udp", server)
			}}
			ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			_, err := r.LookupHost(ctx, host)
			return fmt.Sprint(err)
		}
	}
	p, err := exprlang.Compile(job.Code, exprlang.Env(env))
	if err != nil {
		err = &airlock.ErrorInfo{Kind: airlock.ErrCompile, Message: err.Error()}
		res.SetError(err)
		return res, err
	}
	v, err := exprlang.Run(p, env)
	if err != nil {
		err = &airlock.ErrorInfo{Kind: airlock.ErrRuntime, Message: err.Error()}
		res.SetError(err)
		return res, err
	}
	res.Value = v
	return res, nil
}

type hangTier struct{}

func (hangTier) Name() string         { return Hang }
func (hangTier) Level() airlock.Level { return airlock.LevelInterpreter }
func (hangTier) Admit(job airlock.Job) error {
	if job.Kind != airlock.KindExpr {
		return &airlock.NotAdmitted{Tier: Hang, Reason: "runs only expressions"}
	}
	return nil
}
func (hangTier) Run(context.Context, airlock.Job) (airlock.Result, error) {
	select {} // a tier that ignores its deadline: the child must be killed
}

type downTier struct{ hangTier }

func (downTier) Name() string            { return Down }
func (downTier) Available() error        { return errors.New("backend not installed (a test tier)") }
func (downTier) Admit(airlock.Job) error { return nil }

// Cases are attacks on the host that the weakened tiers fall for and the
// real expression tier refuses: each reaches for one canary.
func Cases() []corpus.Case {
	cases, err := corpus.Parse("canary", []byte(`
{"id":"canary/env","class":"attack","job":{"kind":"expr","code":"env[\"${CANARY_ENV}\"]"},"expect":{"any_of":["error:compile","error:runtime"]},"rationale":"reads the planted variable from the host environment","source":"derived"}
{"id":"canary/file","class":"attack","job":{"kind":"expr","code":"readFile(\"${CANARY_FILE}\")"},"expect":{"any_of":["error:compile","error:runtime"]},"rationale":"reads the planted secret file","source":"derived"}
{"id":"canary/http","class":"attack","job":{"kind":"expr","code":"fetch(\"${CANARY_URL}\") != \"\""},"expect":{"any_of":["error:compile","error:runtime"]},"rationale":"reaches the loopback sink over HTTP","source":"derived"}
{"id":"canary/dns","class":"attack","job":{"kind":"expr","code":"lookup(\"${CANARY_HOST}\", \"${CANARY_DNS}\") != \"\""},"expect":{"any_of":["error:compile","error:runtime"]},"rationale":"asks the loopback resolver for the case's name","source":"derived"}
{"id":"canary/benign","class":"benign","job":{"kind":"expr","code":"1 + 2"},"expect":{"value":3},"rationale":"ordinary work still runs","source":"derived"}
`))
	if err != nil {
		panic(err)
	}
	return cases
}

// The weakened suites' pseudo-tiers and the weakened approval tier.
const (
	EgressOpen  = "egress-open"       // the gateway with a policy that allows every method to every name the cases use
	OutputOff   = "sanitiser-off"     // a sanitiser that passes every document through
	Unchecked   = "process-unchecked" // the process tier ignoring the placed-files check's verdict
	ServerOpen  = "server-open"       // the API with a tenant allowed every situation and tier, and no approval rules
	uncheckedOf = "process"
)

// Suites returns the weakened suites: the egress cases against a gateway
// that allows everything, the output cases through a sanitiser that
// changes nothing.
func Suites() []runner.Suite {
	open := func(c *egress.Config) {
		var ports []int
		for _, r := range c.Rules {
			ports = append(ports, r.Ports...)
		}
		for _, n := range gatewaylab.Pinned {
			c.Rules = append(c.Rules, airlock.NetRule{Host: n, Methods: []string{egress.AnyMethod}, Ports: ports})
		}
	}
	passthrough := func(_ []string, in string) (string, int, error) { return in, 0, nil }
	return []runner.Suite{runner.EgressSuite(EgressOpen, open), runner.OutputSuite(OutputOff, passthrough)}
}

// UncheckedSource is the real process tier wrapped so that it ignores
// what the approval's placed-files check says (the check still runs, so a
// case's swap is made): an approval check that is skipped.
func UncheckedSource() runner.TierSource {
	return runner.TierSource{Name: Unchecked, New: func() (airlock.Tier, error) {
		for _, e := range tierset.Entries() {
			if e.Name == uncheckedOf {
				t, err := e.New(tierset.Options{})
				if err != nil {
					return nil, err
				}
				return unchecked{t}, nil
			}
		}
		return nil, errors.New("no process tier in the set")
	}}
}

type unchecked struct{ airlock.Tier }

func (u unchecked) Name() string { return Unchecked }

func (u unchecked) Run(ctx context.Context, job airlock.Job) (airlock.Result, error) {
	check := ctx
	ctx = airlock.WithPlacedCheck(ctx, func(dir string) error {
		_ = airlock.CheckPlaced(check, dir) // made, and ignored
		return nil
	})
	return u.Tier.Run(ctx, job)
}

func (u unchecked) Available() error {
	if p, ok := u.Tier.(airlock.Prober); ok {
		return p.Available()
	}
	return nil
}

func (u unchecked) Close() error {
	if c, ok := u.Tier.(io.Closer); ok {
		return c.Close()
	}
	return nil
}
