package starlark

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	sl "go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/egresswire"
)

// The http module exists only for a job granted grants.net, and only on a
// tier configured with an egress gateway (Config.WithEgress): each such
// run gets a gateway of its own holding the job's rules, and every request
// (and every redirect hop) goes through it. A script without the grant
// does not even see the name.
//
//	r = http.get(url, headers = {})
//	r = http.request(method, url, body = "", headers = {})
//	r.status, r.body, r.headers   # int, string, dict of string → string
//
// A refusal by the policy ends the run as denied (capability "net").

// maxHTTPRequestBytes caps a request body the script sends.
const maxHTTPRequestBytes = 1 << 20

// httpClient is a run's client; it is cut when the run ends, so that a
// module kept in a session's globals cannot reach a closed run's gateway
// (or act under its rules) in a later run.
type httpClient struct {
	mu sync.Mutex
	c  *http.Client
}

func (h *httpClient) get() *http.Client {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.c
}

func (h *httpClient) cut() {
	h.mu.Lock()
	h.c = nil
	h.mu.Unlock()
}

// httpModule returns the module for a run whose requests go through c.
func httpModule(c *httpClient) *starlarkstruct.Module {
	get := func(th *sl.Thread, b *sl.Builtin, args sl.Tuple, kwargs []sl.Tuple) (sl.Value, error) {
		var url string
		var headers *sl.Dict
		if err := sl.UnpackArgs(b.Name(), args, kwargs, "url", &url, "headers?", &headers); err != nil {
			return nil, err
		}
		return httpDo(th, c, "GET", url, "", headers)
	}
	request := func(th *sl.Thread, b *sl.Builtin, args sl.Tuple, kwargs []sl.Tuple) (sl.Value, error) {
		var method, url, body string
		var headers *sl.Dict
		if err := sl.UnpackArgs(b.Name(), args, kwargs, "method", &method, "url", &url, "body?", &body, "headers?", &headers); err != nil {
			return nil, err
		}
		return httpDo(th, c, strings.ToUpper(method), url, body, headers)
	}
	return &starlarkstruct.Module{Name: "http", Members: sl.StringDict{
		"get":     sl.NewBuiltin("http.get", get),
		"request": sl.NewBuiltin("http.request", request),
	}}
}

func httpDo(th *sl.Thread, hc *httpClient, method, url, body string, headers *sl.Dict) (sl.Value, error) {
	st := stateOf(th)
	c := hc.get()
	if c == nil {
		st.denied = &airlock.Denied{Capability: "net", Detail: "the http module of an earlier run was used: it ends with its run"}
		return nil, st.denied
	}
	if len(body) > maxHTTPRequestBytes {
		return nil, fmt.Errorf("http.request: body of %d bytes is above %d", len(body), maxHTTPRequestBytes)
	}
	ctx, cancel := context.WithDeadline(st.ctx, st.deadline)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("http: %v", err)
	}
	if headers != nil {
		for _, kv := range headers.Items() {
			k, ok1 := sl.AsString(kv[0])
			v, ok2 := sl.AsString(kv[1])
			if !ok1 || !ok2 {
				return nil, errors.New("http: headers must map strings to strings")
			}
			req.Header.Set(k, v)
		}
	}
	resp, err := c.Do(req)
	if err != nil {
		var d *airlock.Denied
		if errors.As(err, &d) {
			st.denied = d
			return nil, d
		}
		if s := st.stopped(); s != nil {
			return nil, s
		}
		return nil, fmt.Errorf("http: %v", err)
	}
	defer resp.Body.Close()
	// The body is read up to what the allocation budget still allows.
	room := st.budget - st.used
	data, err := io.ReadAll(io.LimitReader(resp.Body, room+1))
	if err != nil {
		return nil, fmt.Errorf("http: reading the response: %v", err)
	}
	if err := st.charge(int64(len(data)), "http response"); err != nil {
		return nil, err
	}
	// So are the headers (the gateway bounds them, but a script may keep
	// those of many responses).
	var head int64
	for k, vs := range resp.Header {
		head += int64(len(k)) + 2*elemBytes
		for _, v := range vs {
			head += int64(len(v)) + 2 // ", "
		}
	}
	if err := st.charge(head, "http response headers"); err != nil {
		return nil, err
	}
	h := new(sl.Dict)
	for k, vs := range resp.Header {
		_ = h.SetKey(sl.String(strings.ToLower(k)), sl.String(strings.Join(vs, ", ")))
	}
	return starlarkstruct.FromStringDict(starlarkstruct.Default, sl.StringDict{
		"status":  sl.MakeInt(resp.StatusCode),
		"body":    sl.String(data),
		"headers": h,
	}), nil
}

// startEgress starts the run's gateway when the job is granted net; the
// returned function closes it and returns its decisions (for
// Result.Decision; the configured log gets each one as well).
func (t *Tier) startEgress(ctx context.Context, job *airlock.Job) (*httpClient, func() []string, error) {
	if len(job.Grants.Net) == 0 || t.cfg.egress == nil {
		return nil, func() []string { return nil }, nil
	}
	gw, err := egresswire.New(ctx, egresswire.ForRun(t.cfg.egress, "starlark", job.Grants.Net))
	if err != nil {
		return nil, nil, err
	}
	hc := &httpClient{c: gw.Client()}
	return hc, func() []string { hc.cut(); return gw.Close() }, nil
}
