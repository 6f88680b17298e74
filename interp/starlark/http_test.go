package starlark_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/internal/testing/egresstest"
	"github.com/airlock-sandbox/airlock/interp/starlark"
)

// TestHTTPModule: with WithEgress, a job granted net sees an `http` module
// whose requests go through a gateway holding the job's rules: a granted
// GET to a loopback origin (pinned as origin.test) returns its status and
// body; PUT to it, a redirect to an ungranted host and an ungranted host
// are denied (capability net) and logged; a job without the grant does not
// see `http` at all.
func TestHTTPModule(t *testing.T) {
	o := egresstest.StartOrigin(t, "origin.test")
	rec := &egresstest.Recorder{}
	tier, err := starlark.New(starlark.NewConfig().WithEgress(egress.Config{Job: "star", Hosts: o.Pins, Log: rec.Add}))
	require.NoError(t, err)
	base := "http://origin.test:" + o.Port
	granted := func(code string) airlock.Job {
		j := job(code)
		j.Grants.Net = []airlock.NetRule{o.Rule("origin.test")}
		return j
	}
	ctx := context.Background()

	res, err := tier.Run(ctx, granted(`r = http.get("`+base+`/ok", headers = {"accept": "text/plain"})
result = [r.status, r.body, r.headers["content-type"]]`))
	require.NoError(t, err)
	assert.Equal(t, []any{int64(200), "origin says hello\n", "text/plain; charset=utf-8"}, res.Value)
	require.NotEmpty(t, res.Decision)
	assert.True(t, strings.HasPrefix(res.Decision[0], "egress allow client GET origin.test:"+o.Port+"/ok"), res.Decision[0])

	for name, code := range map[string]string{
		"put":       `http.request("PUT", "` + base + `/ok", body = "x")`,
		"redirect":  `http.get("` + base + `/redirect?to=http://evil.test:` + o.Port + `/")`,
		"other":     `http.get("http://other.test:` + o.Port + `/")`,
		"get-body":  `http.request("GET", "` + base + `/ok", body = "secret")`,
		"head-body": `http.request("HEAD", "` + base + `/ok", body = "secret")`,
	} {
		_, err := tier.Run(ctx, granted(code))
		var d *airlock.Denied
		if assert.ErrorAs(t, err, &d, name) {
			assert.Equal(t, "net", d.Capability, name)
		}
	}
	assert.Equal(t, 2, o.Hits("GET"), "the origin saw the granted GET and the redirect, nothing else")
	assert.Equal(t, 0, o.Hits("PUT"))
	assert.True(t, rec.Has("client", "origin.test", egress.Allow))
	assert.True(t, rec.Has("client", "evil.test", egress.Deny))

	_, err = tier.Run(ctx, job(`r = http.get("`+base+`/ok")`))
	var ce *airlock.ErrorInfo
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, airlock.ErrCompile, ce.Kind)
	assert.Contains(t, ce.Message, "http")
}

// TestHTTPModuleSession: a session keeps its globals between runs, but an
// `http` module (or a reference to it) from a granted run is cut when that
// run ends: a later run without the grant cannot use it.
func TestHTTPModuleSession(t *testing.T) {
	o := egresstest.StartOrigin(t, "origin.test")
	tier, err := starlark.New(starlark.NewConfig().WithEgress(egress.Config{Hosts: o.Pins}))
	require.NoError(t, err)
	ctx := context.Background()
	s, err := tier.OpenSession(ctx, airlock.SessionOptions{})
	require.NoError(t, err)
	defer s.Close()
	url := "http://origin.test:" + o.Port + "/ok"
	j := job(`kept = http
result = kept.get("` + url + `").status`)
	j.Grants.Net = []airlock.NetRule{o.Rule("origin.test")}
	res, err := s.Run(ctx, j)
	require.NoError(t, err)
	assert.Equal(t, int64(200), res.Value)
	for _, code := range []string{`kept.get("` + url + `")`, `http.get("` + url + `")`} {
		_, err = s.Run(ctx, job(code))
		var d *airlock.Denied
		require.ErrorAs(t, err, &d, code)
		assert.Equal(t, "net", d.Capability)
	}
	assert.Equal(t, 1, o.Hits("GET"))
}

// TestHTTPModuleHeadersCharged: a response's headers count against the
// allocation budget like its body, so a script cannot hold more memory
// than limits.memory_mb by keeping the headers of many responses.
func TestHTTPModuleHeadersCharged(t *testing.T) {
	big := strings.Repeat("h", 8<<10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i < 96; i++ { // 768 KiB of headers, no body
			w.Header().Set(fmt.Sprintf("X-Pad-%d", i), big)
		}
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	pins := egress.Hosts{}
	require.NoError(t, pins.Add("heads.test", netip.MustParseAddr("127.0.0.1")))
	tier, err := starlark.New(starlark.NewConfig().WithEgress(egress.Config{Hosts: pins}))
	require.NoError(t, err)
	p, _ := strconv.Atoi(port)
	j := job(`kept = []
for i in range(24):
    kept.append(http.get("http://heads.test:` + port + `/").headers)
result = len(kept)`)
	j.Grants.Net = []airlock.NetRule{{Host: "heads.test", Ports: []int{p}}}
	j.Limits.MemoryMB = 8
	res, err := tier.Run(context.Background(), j)
	var st *airlock.Stop
	require.ErrorAs(t, err, &st, "kept %v (about 18 MiB of headers under an 8 MiB budget)", res.Value)
	assert.Equal(t, airlock.StopMemory, st.Reason)
}
