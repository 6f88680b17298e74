package account

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/interp/starlark"
	"github.com/airlock-sandbox/airlock/server"
)

// countingExecutor is an executor over Starlark on its own peer-checked
// socket, with a count of the requests that reached it.
func countingExecutor(t *testing.T) (string, *atomic.Int64) {
	t.Helper()
	inner, err := starlark.New(starlark.NewConfig())
	if err != nil {
		t.Fatal(err)
	}
	sock := executorOn(t, inner, "")
	// A proxy socket in front of the executor counts what reaches it.
	var n atomic.Int64
	c := newConn(NewConfig("x", sock, os.Getuid()))
	front := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		body, _ := io.ReadAll(r.Body)
		var rd io.Reader
		if len(body) > 0 {
			rd = strings.NewReader(string(body))
		}
		req, _ := http.NewRequestWithContext(r.Context(), r.Method, c.base+r.URL.Path, rd)
		resp, err := c.client.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.WriteHeader(resp.StatusCode)
		io.Copy(w, resp.Body)
	}))
	ln, err := Listen(sock+".front", Allow{UIDs: []uint32{uint32(os.Getuid())}})
	if err != nil {
		t.Fatal(err)
	}
	front.Listener = ln
	front.Start()
	t.Cleanup(front.Close)
	return sock + ".front", &n
}

// TestTenantAccounts: a caller's server on loopback, over an account tier
// that reaches two real executors, lets each tenant reach only the
// accounts its configuration lists. A job naming another account is
// refused before anything reaches that account's executor; a job naming
// none runs under the tenant's first account, whatever the tier's
// default; a session opened for another account is refused too.
func TestTenantAccounts(t *testing.T) {
	sockA, hitsA := countingExecutor(t)
	sockB, hitsB := countingExecutor(t)
	tier := New(NewConfig("alpha", sockA, os.Getuid()), NewConfig("beta", sockB, os.Getuid()))
	srv, err := server.New(server.Config{Tenants: []server.Tenant{
		{Name: "ta", KeySHA256: server.HashKey("ka"), Situation: airlock.SituationCredentials, Accounts: []string{"alpha"}},
		{Name: "tb", KeySHA256: server.HashKey("kb"), Situation: airlock.SituationCredentials, Accounts: []string{"beta"}},
		{Name: "none", KeySHA256: server.HashKey("kn"), Situation: airlock.SituationCredentials},
	}}, []airlock.Tier{tier}, server.Options{})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { hs.Close(); srv.Close() })
	call := func(key, path, body string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, hs.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		var out map[string]any
		json.Unmarshal(data, &out)
		return resp.StatusCode, out
	}
	decision := func(out map[string]any) string {
		b, _ := json.Marshal(out["decision"])
		return string(b)
	}
	job := func(acct string) string {
		j := airlock.Job{Kind: airlock.KindStarlark, Code: "result = 7", Situation: airlock.SituationCredentials, Account: acct}
		b, _ := json.Marshal(j)
		return string(b)
	}

	// The attack: tenant ta names beta.
	code, out := call("ka", "/v1/run", job("beta"))
	msg, _ := json.Marshal(out["error"])
	if code == http.StatusOK || !strings.Contains(string(msg), "tenant ta may not use account beta (allowed: alpha)") || !strings.Contains(string(msg), `"not_admitted"`) {
		t.Fatalf("ta naming beta: %d %v", code, out)
	}
	if n := hitsB.Load(); n != 0 {
		t.Fatalf("the refused job reached beta's executor (%d requests)", n)
	}
	// Its own account, named or by default.
	for _, acct := range []string{"alpha", ""} {
		if code, out := call("ka", "/v1/run", job(acct)); code != http.StatusOK || out["value"] != float64(7) || !strings.Contains(decision(out), "account alpha: ran by its executor") {
			t.Fatalf("ta naming %q: %d %v", acct, code, out)
		}
	}
	// tb's default is beta, not the tier's default alpha.
	before := hitsA.Load()
	if code, out := call("kb", "/v1/run", job("")); code != http.StatusOK || !strings.Contains(decision(out), "account beta: ran by its executor") {
		t.Fatalf("tb by default: %d %v", code, out)
	}
	if hitsA.Load() != before {
		t.Error("tb's job reached alpha's executor")
	}
	// A tenant that lists no account reaches none.
	if code, out := call("kn", "/v1/run", job("")); code == http.StatusOK || !strings.Contains(fmtJSON(out), "may use no account") {
		t.Fatalf("tenant without accounts: %d %v", code, out)
	}
	// Sessions: opened for beta by ta is refused; its own keeps to it.
	if code, out := call("ka", "/v1/sessions", `{"job": `+job("beta")+`}`); code == http.StatusCreated || !strings.Contains(fmtJSON(out), "may not use account beta") {
		t.Fatalf("ta's session for beta: %d %v", code, out)
	}
	code, open := call("ka", "/v1/sessions", `{"job": `+job("")+`}`)
	if code != http.StatusCreated {
		t.Fatalf("ta's session: %d %v", code, open)
	}
	id, _ := open["id"].(string)
	if code, out := call("ka", "/v1/sessions/"+id+"/run", job("")); code != http.StatusOK || !strings.Contains(decision(out), "account alpha") {
		t.Fatalf("run in ta's session: %d %v", code, out)
	}
	if code, out := call("ka", "/v1/sessions/"+id+"/run", job("beta")); code == http.StatusOK || !strings.Contains(fmtJSON(out), "may not use account beta") {
		t.Fatalf("ta naming beta in its session: %d %v", code, out)
	}
	if n := hitsB.Load(); n != 1 {
		t.Errorf("beta's executor got %d requests, want tb's one", n)
	}

	// On the tier alone, an account it is not configured for is refused.
	_, err = tier.Run(t.Context(), airlock.Job{Kind: airlock.KindStarlark, Code: "1", Account: "gamma"})
	var na *airlock.NotAdmitted
	if !errors.As(err, &na) || !strings.Contains(err.Error(), "account gamma is not one this caller is configured to use (configured: alpha, beta)") {
		t.Errorf("gamma on the tier: %v", err)
	}
}

func fmtJSON(v any) string { b, _ := json.Marshal(v); return string(b) }
