package wasm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero/api"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/jobs"
	"github.com/airlock-sandbox/airlock/internal/value"
)

// Host runs WASM tools for a Go program. It is safe for concurrent use.
type Host struct {
	e *engine
}

// NewHost builds a plugin host from cfg (its limit policy, caches and
// HTTP client apply to every tool).
func NewHost(cfg Config) (*Host, error) {
	e, err := newEngine(cfg)
	if err != nil {
		return nil, err
	}
	return &Host{e: e}, nil
}

// Close releases the host's runtime and every tool loaded from it.
func (h *Host) Close() error { return h.e.close() }

// ToolConfig says what a tool may do.
type ToolConfig struct {
	// Functions grants host functions by name: "log", "http_request" and
	// "kv". Calling one that is not granted ends the call with a
	// *airlock.Denied.
	Functions []string
	// Net lists the hosts http_request may reach (checked here, then again
	// by the configured HTTPDoer's egress policy).
	Net []airlock.NetRule
	// Limits bound each call (zero fields take the host's defaults).
	Limits airlock.Limits
	// Env is the guest's whole environment (nothing is inherited).
	Env map[string]string
	// Clock and Seed pin the guest's clock and random_get for every call
	// (zero: the current time, and a fresh seed per call).
	Clock time.Time
	Seed  uint64
	// Log receives each message of the "log" host function; nil collects
	// them in the call's Reply.
	Log func(msg string)
}

// Tool is a compiled module with its grants, ready to be called.
type Tool struct {
	h      *Host
	c      *compiled
	cfg    ToolConfig
	limits airlock.Limits
	once   sync.Once
	closed atomic.Bool
}

// Load compiles a tool once (bounded by the config's compile timeout, not
// by the per-call wall clock). Unknown host function names, modules that
// import functions airlock does not provide, and limits above the host's
// maxima are refused here.
func (h *Host) Load(ctx context.Context, module []byte, cfg ToolConfig) (*Tool, error) {
	for _, f := range cfg.Functions {
		if f != FuncLog && f != FuncHTTPRequest && f != FuncKV {
			return nil, jobs.Invalid("functions", "unknown host function %q (want log, http_request or kv)", f)
		}
	}
	job := airlock.Job{Kind: airlock.KindWasm, Module: module, Limits: cfg.Limits, Grants: airlock.Grants{Net: cfg.Net, Secrets: cfg.Env}}
	prepared, err := h.e.cfg.limits.Prepare(job)
	if err != nil {
		return nil, err
	}
	// Loading is not a call: only the compile timeout bounds it.
	c, err := h.e.acquire(ctx, module)
	if err != nil {
		return nil, err
	}
	cfg.Functions = slices.Clone(cfg.Functions)
	cfg.Net = slices.Clone(cfg.Net)
	return &Tool{h: h, c: c, cfg: cfg, limits: prepared.Limits}, nil
}

// Close releases the tool's compiled module.
func (t *Tool) Close() error {
	t.once.Do(func() {
		t.closed.Store(true)
		t.h.e.release(t.c)
	})
	return nil
}

// Reply is what one call produced.
type Reply struct {
	Output   []byte   // what the tool wrote with output_write
	Log      []string // messages of the log host function (unless ToolConfig.Log is set)
	Stdout   string   // the tool's WASI stdout and stderr, capped together
	Stderr   string
	ExitCode int // for tools that call proc_exit (non-zero: Call's error says so)
	Duration time.Duration
}

// Call runs fn (an exported function taking no arguments) in a fresh
// instance with input readable through input_read, and returns what the
// tool wrote with output_write. The call has no key-value store; use a
// [Session] for that.
func (t *Tool) Call(ctx context.Context, fn string, input []byte) (Reply, error) {
	return t.call(ctx, fn, input, nil)
}

func (t *Tool) call(ctx context.Context, fn string, input []byte, kv *KV) (Reply, error) {
	var rep Reply
	if t.closed.Load() {
		// Its compiled module is released (and closed once evicted).
		return rep, errors.New("wasm tool is closed")
	}
	if fn == "" {
		return rep, jobs.Invalid("entry", "name the function to call")
	}
	if d, ok := exportedFunc(t.c.mod, fn); ok && fn != "_start" {
		// The status is an i32; a wider or other result would be
		// read truncated.
		if r := d.ResultTypes(); len(r) > 1 || (len(r) == 1 && r[0] != api.ValueTypeI32) {
			return rep, jobs.Invalid("entry", "tool function %s must return an i32 status or nothing", fn)
		}
	}
	if int64(len(input)) > value.MaxJobBytes {
		return rep, jobs.Invalid("input", "%d bytes is above %d", len(input), value.MaxJobBytes)
	}
	grants := map[string]bool{}
	for _, f := range t.cfg.Functions {
		grants[f] = true
	}
	var logs []string
	logf := t.cfg.Log
	if logf == nil {
		logf = func(m string) { logs = append(logs, m) }
	}
	host := &hostState{grants: grants, input: input, logf: logf, kv: kv, net: t.cfg.Net, http: t.h.e.cfg.http, respCap: t.limits.OutputBytes}
	clock, seed := t.cfg.Clock, t.cfg.Seed
	if clock.IsZero() {
		clock = time.Now().UTC().Truncate(time.Microsecond)
	}
	if seed == 0 {
		seed = value.NewSeed()
	}
	s := &spec{
		args:     []string{"tool.wasm"},
		env:      t.cfg.Env,
		entry:    fn,
		memLimit: uint64(t.limits.MemoryMB) << 20,
		wall:     t.limits.Wall(),
		clock:    clock,
		seed:     seed,
		outCap:   t.limits.OutputBytes,
		host:     host,
	}
	if fn == "_start" {
		s.entry = ""
	}
	doer, done, err := t.h.e.cfg.doer(ctx, t.cfg.Net)
	if err != nil {
		return rep, err
	}
	defer done()
	host.http = doer
	t0 := time.Now()
	out, err := t.h.e.run(ctx, t.c, s)
	rep = Reply{Output: host.output.Bytes(), Log: logs, Stdout: out.stdout, Stderr: out.stderr, ExitCode: out.exitCode, Duration: time.Since(t0)}
	switch {
	case err != nil:
	case out.exitCode != 0:
		// proc_exit ended the call (a panicking Go reactor exits 2).
		err = &airlock.ErrorInfo{Kind: airlock.ErrRuntime, Message: fmt.Sprintf("tool function %s exited with code %d", fn, out.exitCode)}
	case len(out.results) == 1 && uint32(out.results[0]) != 0:
		err = &airlock.ErrorInfo{Kind: airlock.ErrRuntime, Message: fmt.Sprintf("tool function %s returned status %d", fn, int32(out.results[0]))}
	}
	return rep, err
}

// Session is a series of calls to one tool that share a key-value store.
type Session struct {
	t  *Tool
	id string
	kv *KV
}

// Session opens a session with an empty key-value store, bounded by the
// host's WithKVMaxBytes. id names it; empty picks a random one.
func (t *Tool) Session(id string) *Session {
	if id == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		id = hex.EncodeToString(b[:])
	}
	return &Session{t: t, id: id, kv: NewKV(t.h.e.cfg.kvMaxBytes)}
}

// ID returns the session's name.
func (s *Session) ID() string { return s.id }

// KV returns the session's store (the host may read or seed it).
func (s *Session) KV() *KV { return s.kv }

// Call is [Tool.Call] with the session's key-value store attached (when
// the tool is granted "kv").
func (s *Session) Call(ctx context.Context, fn string, input []byte) (Reply, error) {
	return s.t.call(ctx, fn, input, s.kv)
}

// ErrKVFull is returned by KV.Set when the store would exceed its size.
var ErrKVFull = errors.New("key-value store is full")

// KV is a bounded in-memory key-value store, safe for concurrent use.
type KV struct {
	mu    sync.Mutex
	m     map[string][]byte
	used  int64
	limit int64
}

// kvEntryBytes is what each entry of a KV counts beyond its key and value
// (the map's own memory for it), so that many empty entries are bounded
// too.
const kvEntryBytes = 48

// NewKV returns an empty store holding at most limit bytes of keys and
// values, each entry counting 48 bytes more.
func NewKV(limit int64) *KV { return &KV{m: map[string][]byte{}, limit: limit} }

// Get returns a copy of the value under key.
func (k *KV) Get(key string) ([]byte, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	v, ok := k.m[key]
	return slices.Clone(v), ok
}

// Set stores a copy of val under key, or returns ErrKVFull.
func (k *KV) Set(key string, val []byte) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	size := int64(len(key)+len(val)) + kvEntryBytes
	old, had := k.m[key]
	if had {
		size -= int64(len(key)+len(old)) + kvEntryBytes
	}
	if k.used+size > k.limit {
		return ErrKVFull
	}
	k.m[key] = slices.Clone(val)
	k.used += size
	return nil
}

// Delete removes key.
func (k *KV) Delete(key string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if v, ok := k.m[key]; ok {
		k.used -= int64(len(key)+len(v)) + kvEntryBytes
		delete(k.m, key)
	}
}

// Len returns the number of keys.
func (k *KV) Len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.m)
}
