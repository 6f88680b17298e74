package wasm

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
)

// greetTool is the example tool (wasm/examples/greet), built by the test.
func greetTool(t testing.TB) []byte {
	return goModule(t, "./examples/greet", true)
}

func newHost(t testing.TB, cfg Config) *Host {
	t.Helper()
	h, err := NewHost(testCache(cfg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return h
}

func load(t testing.TB, h *Host, mod []byte, cfg ToolConfig) *Tool {
	t.Helper()
	tool, err := h.Load(context.Background(), mod, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tool.Close() })
	return tool
}

func wantDenied(t testing.TB, err error, capability, detail string) {
	t.Helper()
	var d *airlock.Denied
	if !errors.As(err, &d) {
		t.Fatalf("want *airlock.Denied{%s}, got %T: %v", capability, err, err)
	}
	if d.Capability != capability || !strings.Contains(d.Detail, detail) {
		t.Fatalf("denied %q %q, want %q containing %q", d.Capability, d.Detail, capability, detail)
	}
}

func TestPluginExampleTool(t *testing.T) {
	h := newHost(t, NewConfig())
	tool := load(t, h, greetTool(t), ToolConfig{Functions: []string{FuncLog, FuncKV}})
	sess := tool.Session("")
	ctx := context.Background()
	for i := 1; i <= 3; i++ {
		rep, err := sess.Call(ctx, "greet", []byte("ada"))
		if err != nil {
			t.Fatalf("call %d: %v (%+v)", i, err, rep)
		}
		if want := fmt.Sprintf("hello, ada (call %d)", i); string(rep.Output) != want {
			t.Fatalf("call %d: output %q, want %q", i, rep.Output, want)
		}
		if len(rep.Log) != 1 || rep.Log[0] != "greeting ada" {
			t.Fatalf("call %d: log %q", i, rep.Log)
		}
	}
	if v, _ := sess.KV().Get("calls"); string(v) != "3" {
		t.Fatalf("session store holds calls=%q, want 3", v)
	}
	// Another session starts from an empty store.
	rep, err := tool.Session("other").Call(ctx, "greet", []byte("bob"))
	if err != nil || string(rep.Output) != "hello, bob (call 1)" {
		t.Fatalf("second session: %v %q", err, rep.Output)
	}
	// A tool's own failure is a runtime error carrying its output.
	rep, err = sess.Call(ctx, "greet", nil)
	var ce *airlock.ErrorInfo
	if !errors.As(err, &ce) || ce.Kind != airlock.ErrRuntime || string(rep.Output) != "no name given" {
		t.Fatalf("empty name: %T %v %q", err, err, rep.Output)
	}
	// Unknown function.
	if _, err := sess.Call(ctx, "nope", nil); airlock.KindOf(err) != airlock.ErrInvalid {
		t.Fatalf("unknown function: %v", err)
	}
}

func TestPluginFunctionNotGranted(t *testing.T) {
	h := newHost(t, NewConfig())
	tool := load(t, h, greetTool(t), ToolConfig{}) // nothing granted
	rep, err := tool.Session("s").Call(context.Background(), "greet", []byte("ada"))
	wantDenied(t, err, "host-function", "log was not granted")
	if len(rep.Output) != 0 {
		t.Fatalf("denied call produced output %q", rep.Output)
	}
	// Functions that need no grant still work in the same tool.
	rep, err = tool.Call(context.Background(), "upper", []byte("shout"))
	if err != nil || string(rep.Output) != "SHOUT" {
		t.Fatalf("upper: %v %q", err, rep.Output)
	}
	// kv granted, but a plain call has no session store.
	tool = load(t, h, greetTool(t), ToolConfig{Functions: []string{FuncLog, FuncKV}})
	_, err = tool.Call(context.Background(), "greet", []byte("ada"))
	wantDenied(t, err, "host-function", "kv needs a session")
}

func TestPluginLoadRefusals(t *testing.T) {
	h := newHost(t, NewConfig())
	ctx := context.Background()
	if _, err := h.Load(ctx, greetTool(t), ToolConfig{Functions: []string{"exec"}}); airlock.KindOf(err) != airlock.ErrInvalid {
		t.Fatalf("unknown grant name: %v", err)
	}
	_, err := h.Load(ctx, corpusWAT(t, "unknown-import"), ToolConfig{})
	wantDenied(t, err, "host-function", "env.system")
	if _, err := h.Load(ctx, []byte("not wasm"), ToolConfig{}); airlock.KindOf(err) != airlock.ErrCompile {
		t.Fatalf("garbage module: %v", err)
	}
	if _, err := h.Load(ctx, nil, ToolConfig{}); airlock.KindOf(err) != airlock.ErrInvalid {
		t.Fatalf("empty module: %v", err)
	}
}

// counterWAT keeps a count in a global and reports it through
// output_write: every call is a fresh instance, so it always says 1.
const counterWAT = `(module
  (import "airlock" "output_write" (func $out (param i32 i32)))
  (memory 1)
  (global $n (mut i32) (i32.const 0))
  (func (export "bump") (result i32)
    (global.set $n (i32.add (global.get $n) (i32.const 1)))
    (i32.store8 (i32.const 0) (i32.add (i32.const 48) (global.get $n)))
    (call $out (i32.const 0) (i32.const 1))
    (i32.const 0)))`

func TestPluginFreshInstancePerCall(t *testing.T) {
	h := newHost(t, NewConfig())
	tool := load(t, h, wat(t, counterWAT), ToolConfig{})
	for i := 0; i < 3; i++ {
		rep, err := tool.Call(context.Background(), "bump", nil)
		if err != nil || string(rep.Output) != "1" {
			t.Fatalf("call %d: %v %q (a reused instance would count up)", i, err, rep.Output)
		}
	}
}

func TestPluginLimits(t *testing.T) {
	h := newHost(t, NewConfig())
	spin := load(t, h, corpusWAT(t, "spin-function"), ToolConfig{Limits: airlock.Limits{WallMS: 200}})
	_, err := spin.Call(context.Background(), "spin", nil)
	var st *airlock.Stop
	if !errors.As(err, &st) || st.Reason != airlock.StopTimeout {
		t.Fatalf("spin: %T %v", err, err)
	}
	grow := load(t, h, corpusWAT(t, "memory-grow"), ToolConfig{Limits: airlock.Limits{MemoryMB: 1}})
	// grow returns its page count as a status: non-zero is a tool error
	// whose message carries it.
	_, err = grow.Call(context.Background(), "grow", nil)
	if err == nil || !strings.Contains(err.Error(), "status 16") {
		t.Fatalf("grow under 1 MiB: %v", err)
	}
}

func TestPluginHTTP(t *testing.T) {
	var hits int
	var proxyHeaders []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits++
		for k := range r.Header {
			if strings.HasPrefix(k, "Proxy-") {
				proxyHeaders = append(proxyHeaders, k)
			}
		}
		if r.URL.Path == "/redirect" {
			// A granted host sending the client elsewhere (here, to
			// the same server by IP literal, which no grant matches).
			http.Redirect(w, r, r.URL.Query().Get("to")+"/x", http.StatusFound)
			return
		}
		fmt.Fprintf(w, "%s %s", r.Method, r.URL.Path)
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	port, _ := strconv.Atoi(u.Port())
	local := "http://localhost:" + u.Port() + "/x"
	rule := airlock.NetRule{Host: "localhost", Ports: []int{port}}
	ctx := context.Background()
	req := func(method, u string) []byte { return fmt.Appendf(nil, `{"method":%q,"url":%q}`, method, u) }

	// Egress not wired: no HTTPDoer in the config.
	unwired := newHost(t, NewConfig())
	tool := load(t, unwired, corpusWAT(t, "http-request"), ToolConfig{Functions: []string{FuncHTTPRequest}})
	_, err := tool.Call(ctx, "req", req("GET", local))
	wantDenied(t, err, "net", "no hosts granted")
	tool = load(t, unwired, corpusWAT(t, "http-request"), ToolConfig{Functions: []string{FuncHTTPRequest}, Net: []airlock.NetRule{rule}})
	_, err = tool.Call(ctx, "req", req("GET", local))
	wantDenied(t, err, "net", "egress not wired")

	// Wired to a real client on loopback.
	h := newHost(t, NewConfig().WithHTTP(srv.Client()))
	notGranted := load(t, h, corpusWAT(t, "http-request"), ToolConfig{Net: []airlock.NetRule{rule}})
	_, err = notGranted.Call(ctx, "req", req("GET", local))
	wantDenied(t, err, "host-function", "http_request was not granted")
	tool = load(t, h, corpusWAT(t, "http-request"), ToolConfig{Functions: []string{FuncHTTPRequest}, Net: []airlock.NetRule{rule}})
	rep, err := tool.Call(ctx, "req", fmt.Appendf(nil, `{"url":%q,"headers":{"proxy-authorization":"Basic eDp5","X-Ok":"1"}}`, local))
	if err != nil || !strings.Contains(string(rep.Output), `"status":200`) {
		t.Fatalf("granted GET: %v %s", err, rep.Output)
	}
	if len(proxyHeaders) > 0 {
		t.Fatalf("the guest's %v reached the server (a proxy the client goes through would take them)", proxyHeaders)
	}
	for _, c := range []struct{ method, url, detail string }{
		{"POST", local, "not granted: POST"},                // method not granted
		{"GET", srv.URL + "/x", "not granted"},              // IP literal
		{"GET", "http://example.com/", "not granted"},       // other host
		{"GET", "http://localhost:1/x", "not granted"},      // other port
		{"GET", "file:///etc/passwd", "not an http(s) URL"}, // other scheme
	} {
		_, err := tool.Call(ctx, "req", req(c.method, c.url))
		wantDenied(t, err, "net", c.detail)
	}
	// A body on GET or HEAD would make a read grant a write channel.
	for _, m := range []string{"GET", "HEAD"} {
		_, err := tool.Call(ctx, "req", fmt.Appendf(nil, `{"method":%q,"url":%q,"body":"c2VjcmV0"}`, m, local))
		wantDenied(t, err, "net", "body")
	}
	// A rule's scheme and paths hold too.
	narrow := load(t, h, corpusWAT(t, "http-request"), ToolConfig{Functions: []string{FuncHTTPRequest}, Net: []airlock.NetRule{
		{Host: "localhost", Ports: []int{port}, Paths: []string{"/x"}},
		{Host: "localhost", Ports: []int{port}, Scheme: "https", Paths: []string{"/tls/*"}},
	}})
	for _, c := range []struct{ url, detail string }{
		{"http://localhost:" + u.Port() + "/y", "path /y is not granted"},
		{"http://localhost:" + u.Port() + "/a/..%2fx", "encoded slash"},
		{"http://localhost:" + u.Port() + "/tls/a", "path /tls/a is not granted"}, // the https rule only
	} {
		_, err := narrow.Call(ctx, "req", req("GET", c.url))
		wantDenied(t, err, "net", c.detail)
	}
	if hits != 1 {
		t.Fatalf("server saw %d requests, want exactly the granted one", hits)
	}
	// A redirect to a host that is not granted is refused, not followed.
	_, err = tool.Call(ctx, "req", req("GET", "http://localhost:"+u.Port()+"/redirect?to="+url.QueryEscape(srv.URL)))
	if hits != 2 {
		t.Fatalf("server saw %d requests after the redirect, want 2", hits)
	}
	wantDenied(t, err, "net", "redirect not granted: GET "+srv.URL+"/x")
}

// randWAT writes four bytes of random_get and eight of the clock.
const randWAT = `(module
  (import "wasi_snapshot_preview1" "random_get" (func $random (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "clock_time_get" (func $now (param i32 i64 i32) (result i32)))
  (import "airlock" "output_write" (func $out (param i32 i32)))
  (memory 1)
  (func (export "draw") (result i32)
    (drop (call $random (i32.const 0) (i32.const 4)))
    (drop (call $now (i32.const 0) (i64.const 1) (i32.const 4)))
    (call $out (i32.const 0) (i32.const 12))
    (i32.const 0)))`

func TestPluginPinnedClockAndSeed(t *testing.T) {
	h := newHost(t, NewConfig())
	mod := wat(t, randWAT)
	draw := func(cfg ToolConfig) string {
		rep, err := load(t, h, mod, cfg).Call(context.Background(), "draw", nil)
		if err != nil {
			t.Fatal(err)
		}
		return string(rep.Output)
	}
	pinned := ToolConfig{Clock: time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC), Seed: 9}
	if a, b := draw(pinned), draw(pinned); a != b {
		t.Fatalf("pinned calls differ: %x %x", a, b)
	}
	if a, b := draw(ToolConfig{}), draw(ToolConfig{}); a == b {
		t.Fatalf("unpinned calls are identical: %x", a)
	}
}

// logFloodWAT logs 1 KiB forever.
const logFloodWAT = `(module
  (import "airlock" "log" (func $log (param i32 i32)))
  (memory 1)
  (func (export "flood") (result i32)
    (loop $l (call $log (i32.const 0) (i32.const 1024)) (br $l))
    (i32.const 0)))`

func TestPluginLogIsCapped(t *testing.T) {
	h := newHost(t, NewConfig())
	tool := load(t, h, wat(t, logFloodWAT), ToolConfig{Functions: []string{FuncLog}, Limits: airlock.Limits{OutputBytes: 64 << 10}})
	rep, err := tool.Call(context.Background(), "flood", nil)
	var st *airlock.Stop
	if !errors.As(err, &st) || st.Reason != airlock.StopOutput {
		t.Fatalf("log flood: %T %v", err, err)
	}
	if n := len(rep.Log); n > 64 {
		t.Fatalf("%d KiB of log kept under a 64 KiB cap", n)
	}
}

// TestPluginHostCallWithoutMemory: a module without linear memory that
// calls a host function exchanging bytes gets a plain runtime error, not a
// Go nil-pointer panic inside the host function.
func TestPluginHostCallWithoutMemory(t *testing.T) {
	h := newHost(t, NewConfig())
	tool := load(t, h, wat(t, `(module
  (import "airlock" "output_write" (func $w (param i32 i32)))
  (import "airlock" "input_read" (func $r (param i32)))
  (import "airlock" "kv_get" (func $g (param i32 i32) (result i32)))
  (func (export "write") (result i32) (call $w (i32.const 0) (i32.const 4)) (i32.const 0))
  (func (export "read") (result i32) (call $r (i32.const 0)) (i32.const 0))
  (func (export "kv") (result i32) (drop (call $g (i32.const 0) (i32.const 0))) (i32.const 0)))`), ToolConfig{Functions: []string{FuncKV}})
	for _, fn := range []string{"write", "read", "kv"} {
		_, err := tool.Session("").Call(context.Background(), fn, []byte("in"))
		var ei *airlock.ErrorInfo
		if !errors.As(err, &ei) || ei.Kind != airlock.ErrRuntime || !strings.Contains(ei.Message, "no linear memory") || strings.Contains(ei.Message, "nil pointer") {
			t.Fatalf("%s: %T %v", fn, err, err)
		}
	}
}

// TestPluginEmptyLogsAreCapped: every log message counts against the cap,
// an empty one too, so a guest cannot pile up messages (or flood
// ToolConfig.Log) without bound by logging nothing.
func TestPluginEmptyLogsAreCapped(t *testing.T) {
	h := newHost(t, NewConfig())
	tool := load(t, h, wat(t, `(module
  (import "airlock" "log" (func $log (param i32 i32)))
  (memory 1)
  (func (export "flood") (result i32) (local $i i32)
    (loop $l
      (call $log (i32.const 0) (i32.const 0))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $l (i32.lt_u (local.get $i) (i32.const 1000000))))
    (i32.const 0)))`), ToolConfig{Functions: []string{FuncLog}, Limits: airlock.Limits{OutputBytes: 64 << 10}})
	rep, err := tool.Call(context.Background(), "flood", nil)
	var st *airlock.Stop
	if !errors.As(err, &st) || st.Reason != airlock.StopOutput {
		t.Fatalf("empty log flood: %T %v (%d messages kept)", err, err, len(rep.Log))
	}
	if n := len(rep.Log); n > 64<<10 {
		t.Fatalf("%d messages kept under a 64 KiB cap", n)
	}
}

// TestPluginKVEntriesAreCounted: a session's store counts every entry, not
// only its bytes, so many short keys with empty values cannot hold far
// more host memory than WithKVMaxBytes.
func TestPluginKVEntriesAreCounted(t *testing.T) {
	h := newHost(t, NewConfig().WithKVMaxBytes(64<<10))
	tool := load(t, h, wat(t, `(module
  (import "airlock" "kv_set" (func $set (param i32 i32 i32 i32) (result i32)))
  (memory 1)
  (func (export "fill") (result i32) (local $i i32)
    (loop $l
      (i32.store (i32.const 0) (local.get $i))
      (drop (call $set (i32.const 0) (i32.const 3) (i32.const 8) (i32.const 0)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $l (i32.lt_u (local.get $i) (i32.const 100000))))
    (i32.const 0)))`), ToolConfig{Functions: []string{FuncKV}})
	sess := tool.Session("")
	if _, err := sess.Call(context.Background(), "fill", nil); err != nil {
		t.Fatal(err)
	}
	if n := sess.KV().Len(); n > (64<<10)/kvEntryBytes {
		t.Fatalf("%d entries kept in a 64 KiB store", n)
	}
}

// TestPluginExitIsStatus: a tool function that ends with a non-zero
// proc_exit (as a panicking Go reactor does) failed, like one returning a
// non-zero status; exit 0 is success.
func TestPluginExitIsStatus(t *testing.T) {
	h := newHost(t, NewConfig())
	tool := load(t, h, wat(t, `(module
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (import "airlock" "output_write" (func $w (param i32 i32)))
  (memory 1)
  (data (i32.const 0) "partial")
  (func (export "fail") (result i32) (call $w (i32.const 0) (i32.const 7)) (call $exit (i32.const 3)) (i32.const 0))
  (func (export "done") (result i32) (call $exit (i32.const 0)) (i32.const 1)))`), ToolConfig{})
	rep, err := tool.Call(context.Background(), "fail", nil)
	var ei *airlock.ErrorInfo
	if !errors.As(err, &ei) || ei.Kind != airlock.ErrRuntime || !strings.Contains(ei.Message, "exited with code 3") {
		t.Fatalf("proc_exit(3): %T %v (exit code %d)", err, err, rep.ExitCode)
	}
	if rep.ExitCode != 3 || string(rep.Output) != "partial" {
		t.Fatalf("proc_exit(3): exit code %d, output %q", rep.ExitCode, rep.Output)
	}
	if _, err := tool.Call(context.Background(), "done", nil); err != nil {
		t.Fatalf("proc_exit(0): %v", err)
	}
}

// TestPluginStatusType: a tool function's status is an i32 (or nothing);
// one returning an i64, a float or several values is refused rather than
// read as a truncated status.
func TestPluginStatusType(t *testing.T) {
	h := newHost(t, NewConfig())
	tool := load(t, h, wat(t, `(module
  (func (export "wide") (result i64) (i64.const 0x100000000))
  (func (export "float") (result f32) (f32.const 1))
  (func (export "two") (result i32 i32) (i32.const 0) (i32.const 1))
  (func (export "none"))
  (func (export "ok") (result i32) (i32.const 0)))`), ToolConfig{})
	for _, fn := range []string{"wide", "float", "two"} {
		_, err := tool.Call(context.Background(), fn, nil)
		if airlock.KindOf(err) != airlock.ErrInvalid {
			t.Fatalf("%s: %T %v", fn, err, err)
		}
	}
	for _, fn := range []string{"none", "ok"} {
		if _, err := tool.Call(context.Background(), fn, nil); err != nil {
			t.Fatalf("%s: %v", fn, err)
		}
	}
}

// TestPluginHostCallBounds: offsets and lengths past linear memory, ones
// whose sum wraps around 32 bits, and -1 lengths end the call with a
// runtime error (a length above a host function's own cap with its stop),
// never a panic or a read of host memory.
func TestPluginHostCallBounds(t *testing.T) {
	h := newHost(t, NewConfig())
	tool := load(t, h, wat(t, `(module
  (import "airlock" "output_write" (func $w (param i32 i32)))
  (import "airlock" "input_read" (func $r (param i32)))
  (import "airlock" "log" (func $log (param i32 i32)))
  (import "airlock" "kv_set" (func $set (param i32 i32 i32 i32) (result i32)))
  (import "airlock" "http_request" (func $http (param i32 i32) (result i32)))
  (memory 1)
  (func (export "wrap") (result i32) (call $w (i32.const -16) (i32.const 32)) (i32.const 0))
  (func (export "huge") (result i32) (call $w (i32.const 0) (i32.const -1)) (i32.const 0))
  (func (export "edge") (result i32) (call $w (i32.const 65535) (i32.const 2)) (i32.const 0))
  (func (export "input") (result i32) (call $r (i32.const 65535)) (i32.const 0))
  (func (export "log") (result i32) (call $log (i32.const 65536) (i32.const 1)) (i32.const 0))
  (func (export "kvval") (result i32) (drop (call $set (i32.const 0) (i32.const 1) (i32.const 1) (i32.const -1))) (i32.const 0))
  (func (export "kvkey") (result i32) (drop (call $set (i32.const 0) (i32.const -1) (i32.const 0) (i32.const 0))) (i32.const 0))
  (func (export "http") (result i32) (drop (call $http (i32.const 0) (i32.const -1))) (i32.const 0)))`),
		ToolConfig{Functions: []string{FuncLog, FuncKV, FuncHTTPRequest}})
	for _, fn := range []string{"wrap", "huge", "edge", "input", "log", "kvval", "kvkey"} {
		_, err := tool.Session("").Call(context.Background(), fn, []byte("in"))
		var ei *airlock.ErrorInfo
		if !errors.As(err, &ei) || ei.Kind != airlock.ErrRuntime || !(strings.Contains(ei.Message, "outside linear memory") || strings.Contains(ei.Message, "above")) {
			t.Fatalf("%s: %T %v", fn, err, err)
		}
	}
	_, err := tool.Call(context.Background(), "http", nil)
	var st *airlock.Stop
	if !errors.As(err, &st) || !strings.Contains(st.Detail, "http request of") {
		t.Fatalf("http: %T %v", err, err)
	}
}

// TestPluginHTTPDeadline: a request to a server that does not answer ends
// with the call's wall clock, and is reported as that stop (timeout, or
// killed when the caller cancels), not as a refusal of the request.
func TestPluginHTTPDeadline(t *testing.T) {
	release := make(chan struct{})
	arrived := make(chan struct{}, 8)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	u, _ := url.Parse(srv.URL)
	port, _ := strconv.Atoi(u.Port())
	h := newHost(t, NewConfig().WithHTTP(srv.Client()))
	tool := load(t, h, corpusWAT(t, "http-request"), ToolConfig{
		Functions: []string{FuncHTTPRequest},
		Net:       []airlock.NetRule{{Host: "localhost", Ports: []int{port}}},
		Limits:    airlock.Limits{WallMS: 200},
	})
	req := fmt.Appendf(nil, `{"url":"http://localhost:%d/slow"}`, port)
	_, err := tool.Call(context.Background(), "req", req)
	var st *airlock.Stop
	if !errors.As(err, &st) || st.Reason != airlock.StopTimeout {
		t.Fatalf("a request past the wall clock: want stopped: timeout, got %T %v", err, err)
	}
	<-arrived
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-arrived // the request is waiting for its answer
		cancel()
	}()
	tool = load(t, h, corpusWAT(t, "http-request"), ToolConfig{
		Functions: []string{FuncHTTPRequest},
		Net:       []airlock.NetRule{{Host: "localhost", Ports: []int{port}}},
		Limits:    airlock.Limits{WallMS: 60000},
	})
	_, err = tool.Call(ctx, "req", req)
	if !errors.As(err, &st) || st.Reason != airlock.StopKilled {
		t.Fatalf("a request whose caller cancelled: want stopped: killed, got %T %v", err, err)
	}
}

// TestPluginCallAfterClose: a closed tool says so, whether or not its
// compiled module is still cached, rather than running on a module it
// released or failing inside wazero.
func TestPluginCallAfterClose(t *testing.T) {
	h := newHost(t, NewConfig())
	tool, err := h.Load(context.Background(), greetTool(t), ToolConfig{})
	if err != nil {
		t.Fatal(err)
	}
	must(t, tool.Close())
	if _, err := tool.Call(context.Background(), "upper", []byte("x")); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("a call after Close: %v", err)
	}
}
