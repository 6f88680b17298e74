package wasm

import (
	"container/list"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/jobs"
	"github.com/airlock-sandbox/airlock/internal/statedir"
)

const (
	wasiModule = wasi_snapshot_preview1.ModuleName
	pageSize   = 1 << 16
	maxPages   = 1 << 16 // 4 GiB, wazero's ceiling for a 32-bit memory
)

// engine is one wazero runtime with its host modules and a bounded cache
// of compiled modules keyed by the hash of their bytes. The Tier and the
// plugin Host are thin layers over it.
type engine struct {
	cfg      Config
	rt       wazero.Runtime
	cache    wazero.CompilationCache
	memPages uint32 // the runtime-wide page cap (the policy's maximum)

	mu       sync.Mutex
	lru      *list.List // of *compiled, most recently used first
	byHash   map[[32]byte]*list.Element
	inflight map[[32]byte]*compileCall
	closed   bool
	compiles sync.WaitGroup // compiles still running, which close waits for
	// slots bounds the compiles that run at once: a compile cannot be
	// interrupted, and callers that gave up must not be able to pile up
	// compiles of distinct modules behind them.
	slots chan struct{}
}

// compiled is a module compiled once and instantiated per run. refs
// counts the runs using it; an evicted module is closed when the last of
// them ends.
type compiled struct {
	hash    [32]byte
	mod     wazero.CompiledModule
	info    moduleInfo
	refs    int
	evicted bool
}

type compileCall struct {
	done    chan struct{}
	c       *compiled
	err     error
	waiters int // callers still waiting; none left before it starts: not compiled
}

// errAbandoned ends a compile that every caller gave up on before it
// started.
var errAbandoned = errors.New("compile abandoned: every caller gave up waiting")

func newEngine(cfg Config) (*engine, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ctx := context.Background()
	var (
		cache wazero.CompilationCache
		err   error
	)
	if cfg.cacheDir != "" {
		// The cache holds machine code the runtime executes as is: whoever
		// can write to it, or replace it, runs code in this process.
		if _, err := statedir.Ensure(cfg.cacheDir, 0o700); err != nil {
			return nil, jobs.Invalid("", "wasm compilation cache: %v (it holds machine code this process runs)", err)
		}
		if cache, err = wazero.NewCompilationCacheWithDir(cfg.cacheDir); err != nil {
			return nil, fmt.Errorf("opening the compilation cache: %w", err)
		}
	} else {
		cache = wazero.NewCompilationCache()
	}
	pages := uint32(maxPages)
	if mb := cfg.limits.Max.MemoryMB; mb > 0 && mb*16 < maxPages {
		pages = uint32(mb * 16)
	}
	rc := wazero.NewRuntimeConfig()
	if cfg.interpreter {
		rc = wazero.NewRuntimeConfigInterpreter()
	}
	rc = rc.WithCloseOnContextDone(true).
		WithMemoryLimitPages(pages).
		WithCompilationCache(cache).
		WithDebugInfoEnabled(false).
		WithCustomSections(false)
	rt := wazero.NewRuntimeWithConfig(ctx, rc)
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, rt); err != nil {
		_ = rt.Close(ctx)
		return nil, fmt.Errorf("instantiating WASI: %w", err)
	}
	if err := instantiateHost(ctx, rt); err != nil {
		_ = rt.Close(ctx)
		return nil, fmt.Errorf("instantiating the airlock host module: %w", err)
	}
	return &engine{
		cfg: cfg, rt: rt, cache: cache, memPages: pages,
		lru: list.New(), byHash: map[[32]byte]*list.Element{}, inflight: map[[32]byte]*compileCall{},
		slots: make(chan struct{}, max(1, runtime.GOMAXPROCS(0))),
	}, nil
}

// close releases the runtime and the in-memory cache; the on-disk cache
// stays. It waits for compiles that callers gave up on: wazero must not
// compile into a closed runtime.
func (e *engine) close() error {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	e.compiles.Wait()
	ctx := context.Background()
	err := e.rt.Close(ctx)
	return errors.Join(err, e.cache.Close(ctx))
}

// acquire returns the compiled form of mod, compiling it at most once for
// concurrent callers, and waiting at most the configured compile timeout.
// The caller must release it.
func (e *engine) acquire(ctx context.Context, mod []byte) (*compiled, error) {
	if int64(len(mod)) > e.cfg.maxModuleBytes {
		return nil, &airlock.Stop{Reason: airlock.StopMemory, Detail: fmt.Sprintf("module of %d bytes is above the cap of %d", len(mod), e.cfg.maxModuleBytes)}
	}
	h := sha256.Sum256(mod)
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, errors.New("wasm engine is closed")
	}
	if el, ok := e.byHash[h]; ok {
		e.lru.MoveToFront(el)
		c := el.Value.(*compiled)
		c.refs++
		e.mu.Unlock()
		return c, nil
	}
	call, ok := e.inflight[h]
	if !ok {
		call = &compileCall{done: make(chan struct{})}
		e.inflight[h] = call
		e.compiles.Add(1)
		go e.compile(h, mod, call)
	}
	call.waiters++
	e.mu.Unlock()
	giveUp := func() {
		e.mu.Lock()
		call.waiters--
		e.mu.Unlock()
	}

	limit := e.cfg.compileTimeout
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case <-call.done:
	case <-timer.C:
		giveUp()
		return nil, &airlock.Stop{Reason: airlock.StopTimeout, Detail: fmt.Sprintf("compiling the module took longer than %v", limit)}
	case <-ctx.Done():
		giveUp()
		return nil, &airlock.Stop{Reason: airlock.StopKilled, Detail: "cancelled while compiling the module"}
	}
	if call.err != nil {
		return nil, call.err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if el, ok := e.byHash[h]; ok {
		c := el.Value.(*compiled)
		c.refs++
		return c, nil
	}
	// Evicted between compile and now: use it once more, then close it.
	call.c.refs++
	return call.c, nil
}

// compile runs in its own goroutine so that a caller can give up on a
// compile that takes too long; the compile still finishes (wazero cannot
// interrupt it) and its result is cached for the next caller.
func (e *engine) compile(h [32]byte, mod []byte, call *compileCall) {
	defer e.compiles.Done()
	defer close(call.done)
	e.slots <- struct{}{}
	defer func() { <-e.slots }()
	e.mu.Lock()
	if call.waiters == 0 || e.closed {
		delete(e.inflight, h)
		call.err = errAbandoned
		if e.closed {
			call.err = errors.New("wasm engine is closed")
		}
		e.mu.Unlock()
		return
	}
	e.mu.Unlock()
	c, err := e.compileNow(mod)
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.inflight, h)
	if err != nil {
		call.err = err
		return
	}
	if e.closed {
		_ = c.mod.Close(context.Background())
		call.err = errors.New("wasm engine is closed")
		return
	}
	c.hash = h
	call.c = c
	e.byHash[h] = e.lru.PushFront(c)
	for e.lru.Len() > e.cfg.maxCompiled {
		old := e.lru.Back()
		e.lru.Remove(old)
		oc := old.Value.(*compiled)
		delete(e.byHash, oc.hash)
		oc.evicted = true
		if oc.refs == 0 {
			_ = oc.mod.Close(context.Background())
		}
	}
}

func (e *engine) compileNow(mod []byte) (*compiled, error) {
	bin, info, err := inspect(mod, e.cfg.maxTable)
	if err != nil {
		var te *tableError
		if errors.As(err, &te) {
			return nil, &airlock.Stop{Reason: airlock.StopMemory, Detail: te.Error()}
		}
		return nil, &airlock.ErrorInfo{Kind: airlock.ErrCompile, Message: err.Error()}
	}
	if bin, info.stackGuard, err = guardStack(bin); err != nil {
		return nil, &airlock.ErrorInfo{Kind: airlock.ErrCompile, Message: err.Error()}
	}
	if int64(len(bin)) > e.cfg.maxModuleBytes {
		// The guard's thunks are compiled too: the cap bounds what is.
		return nil, &airlock.Stop{Reason: airlock.StopMemory, Detail: fmt.Sprintf("module of %d bytes is %d bytes with its call-stack guard, above the cap of %d", len(mod), len(bin), e.cfg.maxModuleBytes)}
	}
	if info.memMinPages > e.memPages {
		return nil, &airlock.Stop{Reason: airlock.StopMemory, Detail: fmt.Sprintf("module declares a memory of %d pages, above the cap of %d", info.memMinPages, e.memPages)}
	}
	cm, err := e.rt.CompileModule(context.Background(), bin)
	if err != nil {
		return nil, &airlock.ErrorInfo{Kind: airlock.ErrCompile, Message: err.Error()}
	}
	if err := checkImports(cm); err != nil {
		_ = cm.Close(context.Background())
		return nil, err
	}
	return &compiled{mod: cm, info: info}, nil
}

// release ends one run's use of c.
func (e *engine) release(c *compiled) {
	e.mu.Lock()
	defer e.mu.Unlock()
	c.refs--
	if c.evicted && c.refs == 0 {
		_ = c.mod.Close(context.Background())
	}
}

// checkImports refuses a module that imports a function airlock does not
// provide, naming it, so that the failure is a clear denial rather than a
// link error at instantiation.
func checkImports(cm wazero.CompiledModule) error {
	for _, f := range cm.ImportedFunctions() {
		modName, name, _ := f.Import()
		switch {
		case modName == wasiModule:
		case modName == hostModule && hostFunctions[name] != "":
		default:
			return &airlock.Denied{Capability: "host-function", Detail: fmt.Sprintf("module imports %s.%s, which airlock does not provide", modName, name)}
		}
	}
	return nil
}

// exportedFunc looks up an exported function's definition.
func exportedFunc(cm wazero.CompiledModule, name string) (api.FunctionDefinition, bool) {
	d, ok := cm.ExportedFunctions()[name]
	return d, ok
}
