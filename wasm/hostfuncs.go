package wasm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/internal/value"
)

// hostModule is the import module of airlock's host functions.
const hostModule = "airlock"

// The grantable host functions. input_size, input_read, output_write and
// result_read are the calling convention and always available.
const (
	FuncLog         = "log"
	FuncHTTPRequest = "http_request"
	FuncKV          = "kv" // kv_get, kv_set and kv_delete
)

// hostFunctions maps each import name to the grant it needs ("-" for
// none).
var hostFunctions = map[string]string{
	"input_size":   "-",
	"input_read":   "-",
	"output_write": "-",
	"result_read":  "-",
	"log":          FuncLog,
	"http_request": FuncHTTPRequest,
	"kv_get":       FuncKV,
	"kv_set":       FuncKV,
	"kv_delete":    FuncKV,
}

// Limits of the host-function calling convention.
const (
	maxKeyBytes     = 256
	maxRequestBytes = 1 << 20
	logEntryBytes   = 16   // what a log message counts beyond its length
	maxQuoted       = 2048 // bytes of a guest's request an error quotes
)

type stateKey struct{}

// hostState is one run's view of the host functions: what is granted and
// the buffers they exchange with the guest.
type hostState struct {
	grants   map[string]bool
	input    []byte
	output   bytes.Buffer
	result   []byte
	logf     func(string)
	kv       *KV
	net      []airlock.NetRule
	http     HTTPDoer
	respCap  int64 // caps the output, a response and the log, each
	logBytes int64
	outs     *outputs
	toStd    bool  // output_write goes to stdout (tier jobs)
	err      error // the denial or stop that ended the run
}

// fail records err as the reason the run ended and unwinds the guest.
func (s *hostState) fail(err error) {
	s.err = err
	panic(err)
}

// ended unwinds the guest, without a reason of its own, when the run's
// context has ended (its wall clock, its output cap, or its caller): a
// request cut short by that is the run's stop, not a refusal of the
// request.
func (s *hostState) ended(ctx context.Context) {
	if ctx.Err() != nil {
		panic(context.Cause(ctx))
	}
}

func (s *hostState) need(grant, what string) {
	if !s.grants[grant] {
		s.fail(&airlock.Denied{Capability: "host-function", Detail: fmt.Sprintf("%s was not granted (attempted %s)", grant, what)})
	}
}

func state(ctx context.Context) *hostState {
	s, _ := ctx.Value(stateKey{}).(*hostState)
	if s == nil {
		panic(&airlock.Denied{Capability: "host-function", Detail: "no host state for this call"})
	}
	return s
}

// memory returns the calling module's linear memory; a module that has
// none cannot exchange bytes with the host. (wazero answers such a module
// with a nil pointer inside a non-nil api.Memory.)
func (s *hostState) memory(mod api.Module, what string) api.Memory {
	mem := mod.Memory()
	if mem == nil || (reflect.ValueOf(mem).Kind() == reflect.Pointer && reflect.ValueOf(mem).IsNil()) {
		s.fail(&airlock.ErrorInfo{Kind: airlock.ErrRuntime, Message: what + ": the module has no linear memory"})
	}
	return mem
}

func (s *hostState) read(mod api.Module, ptr, n uint32, what string) []byte {
	mem := s.memory(mod, what)
	b, ok := mem.Read(ptr, n)
	if !ok {
		s.fail(&airlock.ErrorInfo{Kind: airlock.ErrRuntime, Message: fmt.Sprintf("%s: %d bytes at %d are outside linear memory", what, n, ptr)})
	}
	return b
}

func (s *hostState) write(mod api.Module, ptr uint32, b []byte, what string) {
	if !s.memory(mod, what).Write(ptr, b) {
		s.fail(&airlock.ErrorInfo{Kind: airlock.ErrRuntime, Message: fmt.Sprintf("%s: %d bytes at %d are outside linear memory", what, len(b), ptr)})
	}
}

// setResult stores bytes for result_read and returns their length.
func (s *hostState) setResult(b []byte) uint64 {
	s.result = b
	return uint64(uint32(len(b)))
}

// instantiateHost defines the airlock host module in rt once; each
// function finds its run's state in the call's context.
func instantiateHost(ctx context.Context, rt wazero.Runtime) error {
	i32 := api.ValueTypeI32
	b := rt.NewHostModuleBuilder(hostModule)
	def := func(name string, params, results []api.ValueType, fn func(ctx context.Context, s *hostState, mod api.Module, stack []uint64)) {
		b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
			fn(ctx, state(ctx), mod, stack)
		}), params, results).Export(name)
	}
	def("input_size", nil, []api.ValueType{i32}, func(_ context.Context, s *hostState, _ api.Module, st []uint64) {
		st[0] = uint64(uint32(len(s.input)))
	})
	def("input_read", []api.ValueType{i32}, nil, func(_ context.Context, s *hostState, mod api.Module, st []uint64) {
		s.write(mod, uint32(st[0]), s.input, "input_read")
	})
	def("result_read", []api.ValueType{i32}, nil, func(_ context.Context, s *hostState, mod api.Module, st []uint64) {
		s.write(mod, uint32(st[0]), s.result, "result_read")
	})
	def("output_write", []api.ValueType{i32, i32}, nil, func(_ context.Context, s *hostState, mod api.Module, st []uint64) {
		b := s.read(mod, uint32(st[0]), uint32(st[1]), "output_write")
		if s.toStd {
			_, _ = s.outs.write(&s.outs.stdout, b)
			return
		}
		if int64(s.output.Len()+len(b)) > s.respCap {
			s.fail(&airlock.Stop{Reason: airlock.StopOutput, Detail: fmt.Sprintf("tool output above %d bytes", s.respCap)})
		}
		s.output.Write(b)
	})
	def("log", []api.ValueType{i32, i32}, nil, func(_ context.Context, s *hostState, mod api.Module, st []uint64) {
		s.need(FuncLog, "log")
		b := s.read(mod, uint32(st[0]), uint32(st[1]), "log")
		if s.logf != nil {
			// The host's log is bounded like the output; every message
			// counts logEntryBytes more than its length, so that empty
			// ones cannot pile up without bound either.
			if s.logBytes += int64(len(b)) + logEntryBytes; s.logBytes > s.respCap {
				s.fail(&airlock.Stop{Reason: airlock.StopOutput, Detail: fmt.Sprintf("log above %d bytes", s.respCap)})
			}
			s.logf(string(b))
			return
		}
		msg := string(b)
		_, _ = s.outs.write(&s.outs.stderr, []byte(msg+"\n"))
	})
	def("http_request", []api.ValueType{i32, i32}, []api.ValueType{i32}, func(ctx context.Context, s *hostState, mod api.Module, st []uint64) {
		if uint32(st[1]) > maxRequestBytes {
			s.fail(&airlock.Stop{Reason: airlock.StopOutput, Detail: fmt.Sprintf("http request of %d bytes is above %d", uint32(st[1]), maxRequestBytes)})
		}
		req := s.read(mod, uint32(st[0]), uint32(st[1]), "http_request")
		st[0] = s.setResult(s.httpRequest(ctx, req))
	})
	def("kv_get", []api.ValueType{i32, i32}, []api.ValueType{i32}, func(_ context.Context, s *hostState, mod api.Module, st []uint64) {
		s.need(FuncKV, "kv_get")
		key := s.key(mod, st[0], st[1])
		v, ok := s.kv.Get(key)
		if !ok {
			st[0] = uint64(0xffffffff) // -1: absent
			return
		}
		st[0] = s.setResult(v)
	})
	def("kv_set", []api.ValueType{i32, i32, i32, i32}, []api.ValueType{i32}, func(_ context.Context, s *hostState, mod api.Module, st []uint64) {
		s.need(FuncKV, "kv_set")
		key := s.key(mod, st[0], st[1])
		val := s.read(mod, uint32(st[2]), uint32(st[3]), "kv_set")
		if err := s.kv.Set(key, val); err != nil {
			st[0] = uint64(0xffffffff) // -1: over quota
			return
		}
		st[0] = 0
	})
	def("kv_delete", []api.ValueType{i32, i32}, nil, func(_ context.Context, s *hostState, mod api.Module, st []uint64) {
		s.need(FuncKV, "kv_delete")
		s.kv.Delete(s.key(mod, st[0], st[1]))
	})
	_, err := b.Instantiate(ctx)
	return err
}

func (s *hostState) key(mod api.Module, ptr64, n64 uint64) string {
	ptr, n := uint32(ptr64), uint32(n64) // i32 arguments: the upper bits are not the guest's
	if n > maxKeyBytes {
		s.fail(&airlock.ErrorInfo{Kind: airlock.ErrRuntime, Message: fmt.Sprintf("kv key of %d bytes is above %d", n, maxKeyBytes)})
	}
	if s.kv == nil {
		s.fail(&airlock.Denied{Capability: "host-function", Detail: "kv needs a session (no store is attached to this call)"})
	}
	return string(s.read(mod, ptr, n, "kv key"))
}

// HTTPRequest is the guest's request to http_request, as JSON.
type HTTPRequest struct {
	Method  string            `json:"method"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers,omitempty"`
	Body    []byte            `json:"body,omitempty"` // base64 in JSON
}

// HTTPResponse is what http_request returns to the guest, as JSON.
type HTTPResponse struct {
	Status  int               `json:"status"`
	Headers map[string]string `json:"headers,omitempty"`
	Body    []byte            `json:"body,omitempty"` // base64 in JSON
}

// httpRequest checks a guest request against the network grants, sends it
// through the configured HTTPDoer, and returns the response as JSON. Every
// refusal ends the call with a *airlock.Denied naming what was attempted.
func (s *hostState) httpRequest(ctx context.Context, raw []byte) []byte {
	s.need(FuncHTTPRequest, "http_request")
	var r HTTPRequest
	if err := json.Unmarshal(raw, &r); err != nil {
		s.fail(&airlock.ErrorInfo{Kind: airlock.ErrRuntime, Message: "http_request: malformed request JSON: " + err.Error()})
	}
	if r.Method == "" {
		r.Method = http.MethodGet
	}
	// The request is the guest's, up to a MiB: its errors quote only the
	// start of it.
	what := value.Clip(r.Method+" "+r.URL, maxQuoted)
	u, err := url.Parse(r.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		s.fail(&airlock.Denied{Capability: "net", Detail: "not an http(s) URL with a host: " + what})
	}
	if len(s.net) == 0 {
		s.fail(&airlock.Denied{Capability: "net", Detail: "no hosts granted: " + what})
	}
	if ok, reason := allowed(s.net, r.Method, u); !ok {
		s.fail(&airlock.Denied{Capability: "net", Detail: "not granted: " + what + " (" + reason + ")"})
	}
	if len(r.Body) > 0 && egress.RefusesBody(r.Method) {
		s.fail(&airlock.Denied{Capability: "net", Detail: "a " + r.Method + " request may not carry a body: " + what})
	}
	if s.http == nil {
		s.fail(&airlock.Denied{Capability: "net", Detail: "egress not wired (no HTTP client configured): " + what})
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, u.String(), bytes.NewReader(r.Body))
	if err != nil {
		s.fail(&airlock.ErrorInfo{Kind: airlock.ErrRuntime, Message: "http_request: " + value.Clip(err.Error(), maxQuoted)})
	}
	for k, v := range r.Headers {
		// Proxy-* headers speak to a proxy the configured client may go
		// through, with the operator's credentials: never the guest's.
		if !strings.HasPrefix(http.CanonicalHeaderKey(k), "Proxy-") {
			req.Header.Set(k, v)
		}
	}
	resp, err := checkRedirects(s.http, s.net).Do(req)
	if err != nil {
		s.ended(ctx)
		var d *airlock.Denied
		if errors.As(err, &d) {
			s.fail(&airlock.Denied{Capability: d.Capability, Detail: value.Clip(d.Detail, maxQuoted)})
		}
		s.fail(&airlock.Denied{Capability: "net", Detail: what + ": " + value.Clip(err.Error(), maxQuoted)})
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, s.respCap+1))
	if err != nil {
		s.ended(ctx)
		s.fail(&airlock.ErrorInfo{Kind: airlock.ErrRuntime, Message: fmt.Sprintf("http_request: reading the response: %v", err)})
	}
	if int64(len(body)) > s.respCap {
		s.fail(&airlock.Stop{Reason: airlock.StopOutput, Detail: fmt.Sprintf("http response above %d bytes", s.respCap)})
	}
	out := HTTPResponse{Status: resp.StatusCode, Body: body, Headers: map[string]string{}}
	for k := range resp.Header {
		out.Headers[k] = resp.Header.Get(k)
	}
	j, _ := json.Marshal(out)
	return j
}

// checkRedirects makes an *http.Client check every redirect hop against
// the grants too (other HTTPDoers, such as the egress proxy's client, check
// hops themselves).
func checkRedirects(d HTTPDoer, rules []airlock.NetRule) HTTPDoer {
	c, ok := d.(*http.Client)
	if !ok {
		return d
	}
	cc := *c
	next := c.CheckRedirect
	cc.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if ok, reason := allowed(rules, req.Method, req.URL); !ok {
			return &airlock.Denied{Capability: "net", Detail: "redirect not granted: " + req.Method + " " + req.URL.String() + " (" + reason + ")"}
		}
		if next != nil {
			return next(req, via)
		}
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		return nil
	}
	return &cc
}

// allowed reports whether a rule grants method on u (its scheme, host,
// port and path), by the egress policy's own reading of the rules, and
// says why not.
func allowed(rules []airlock.NetRule, method string, u *url.URL) (bool, string) {
	p, err := egress.NewPolicy(rules)
	if err != nil {
		return false, err.Error()
	}
	port := 443
	if u.Scheme == "http" {
		port = 80
	}
	if s := u.Port(); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			return false, "bad port " + strconv.Quote(s)
		}
		port = n
	}
	path, _, _ := strings.Cut(u.RequestURI(), "?") // as the client will send it
	return p.Check(method, u.Scheme, u.Hostname(), port, path)
}
