package wasm

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/internal/testing/egresstest"
)

// TestEgressGateway: with WithEgress, a plugin's http_request goes through
// a gateway of its own that applies the tool's rules: a granted GET to a
// loopback origin (pinned as origin.test) succeeds; a granted name that
// resolves to loopback without an operator's pin (localhost) passes the
// host function's own check but is refused by the gateway; a redirect to
// an ungranted host is refused; the decisions are logged.
func TestEgressGateway(t *testing.T) {
	o := egresstest.StartOrigin(t, "origin.test")
	rec := &egresstest.Recorder{}
	h := newHost(t, NewConfig().WithEgress(egress.Config{Job: "plugin", Hosts: o.Pins, Log: rec.Add}))
	base := "http://origin.test:" + o.Port
	rules := []airlock.NetRule{o.Rule("origin.test"), o.Rule("localhost")}
	tool := load(t, h, corpusWAT(t, "http-request"), ToolConfig{Functions: []string{FuncHTTPRequest}, Net: rules})
	ctx := context.Background()
	req := func(u string) []byte { return fmt.Appendf(nil, `{"method":"GET","url":%q}`, u) }

	rep, err := tool.Call(ctx, "req", req(base+"/ok"))
	if err != nil || !strings.Contains(string(rep.Output), `"status":200`) {
		t.Fatalf("granted GET: %v %s", err, rep.Output)
	}
	_, err = tool.Call(ctx, "req", req("http://localhost:"+o.Port+"/"))
	wantDenied(t, err, "net", "localhost")
	_, err = tool.Call(ctx, "req", req(base+"/redirect?to=http://evil.test:"+o.Port+"/"))
	wantDenied(t, err, "net", "evil.test")
	if o.Hits("GET") != 2 { // /ok and /redirect; never localhost nor evil.test's hop
		t.Errorf("origin saw %d GETs, want 2", o.Hits("GET"))
	}
	if !rec.Has("client", "origin.test", egress.Allow) || !rec.Has("client", "localhost", egress.Deny) {
		t.Errorf("decisions not logged as expected")
	}
}

// TestEgressTierJob: a wasm job's http_request goes through a gateway
// holding the job's grants.net; a job without them is refused before any
// gateway exists.
func TestEgressTierJob(t *testing.T) {
	o := egresstest.StartOrigin(t, "origin.test")
	rec := &egresstest.Recorder{}
	tier := newTier(t, NewConfig().WithEgress(egress.Config{Job: "wasm-job", Hosts: o.Pins, Log: rec.Add}))
	job := airlock.Job{Kind: airlock.KindWasm, Module: corpusWAT(t, "http-request"), Entry: "req",
		Stdin: fmt.Sprintf(`{"method":"GET","url":"http://origin.test:%s/ok"}`, o.Port)}
	_, err := tier.Run(context.Background(), job)
	wantDenied(t, err, "net", "no hosts granted")
	if rec.Len() != 0 {
		t.Fatal("a job without a grant reached a gateway")
	}
	job.Grants.Net = []airlock.NetRule{o.Rule("origin.test")}
	res, err := tier.Run(context.Background(), job)
	if err != nil || !strings.Contains(res.Stdout, `"status":200`) {
		t.Fatalf("granted GET: %v %+v", err, res)
	}
	if !rec.Has("client", "origin.test", egress.Allow) || o.Hits("GET") != 1 {
		t.Errorf("the request did not go through the job's gateway")
	}
	if len(res.Decision) != 1 || !strings.HasPrefix(res.Decision[0], "egress allow client GET origin.test:") {
		t.Errorf("result's decisions: %q", res.Decision)
	}
}

// TestHTTPRequestErrorsQuoteLittle: a refused request of a MiB (here as
// much as the test module's memory holds) is quoted in its error by its
// start only, whichever check refuses it.
func TestHTTPRequestErrorsQuoteLittle(t *testing.T) {
	o := egresstest.StartOrigin(t, "origin.test")
	h := newHost(t, NewConfig().WithEgress(egress.Config{Job: "plugin", Hosts: o.Pins}))
	rules := []airlock.NetRule{o.Rule("origin.test"), o.Rule("localhost")}
	tool := load(t, h, corpusWAT(t, "http-request"), ToolConfig{Functions: []string{FuncHTTPRequest}, Net: rules})
	long := strings.Repeat("a", 120<<10)
	for _, u := range []string{
		"http://evil.test/" + long,                                               // not granted, by the host function
		"http://localhost:" + o.Port + "/" + long,                                // refused by the gateway (loopback, not pinned)
		"http://origin.test:" + o.Port + "/redirect?to=http://evil.test/" + long, // a redirect not granted
	} {
		_, err := tool.Call(context.Background(), "req", fmt.Appendf(nil, `{"method":"GET","url":%q}`, u))
		if err == nil {
			t.Fatalf("%.40s...: no error", u)
		}
		if n := len(err.Error()); n > 8<<10 {
			t.Errorf("%.40s...: an error of %d bytes", u, n)
		}
	}
}
