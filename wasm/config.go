package wasm

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/internal/egresswire"
	"github.com/airlock-sandbox/airlock/internal/jobs"
	"github.com/airlock-sandbox/airlock/internal/statedir"
)

// Defaults for a [Config].
const (
	DefaultMaxModuleBytes   = 64 << 20         // modules above this are refused
	DefaultCompileTimeout   = 30 * time.Second // compiling longer than this is refused
	DefaultMaxTableElements = 1 << 20          // 8 MiB of references, all of a module's tables together
	DefaultMaxCompiled      = 64               // compiled modules kept in memory
	DefaultClockTick        = time.Microsecond // how far the pinned clocks advance per read
	DefaultScratchMB        = 16               // the in-memory scratch when a job has files but no size
	DefaultKVMaxBytes       = 1 << 20          // bytes a plugin session's key-value store may hold
)

// HTTPDoer sends an HTTP request on a guest's behalf. The egress policy
// engine (which allows by host and method, refuses private addresses and
// checks redirects) implements it; *http.Client does too, for tests.
type HTTPDoer interface {
	Do(*http.Request) (*http.Response, error)
}

// Config configures a [Tier] or a [Host]. It is immutable: every With
// method returns a modified copy. The zero value is not useful; start from
// [NewConfig].
type Config struct {
	limits         airlock.LimitPolicy
	cacheDir       string
	maxModuleBytes int64
	compileTimeout time.Duration
	maxTable       uint32
	maxCompiled    int
	clockTick      time.Duration
	http           HTTPDoer
	egress         *egress.Config
	interpreter    bool
	kvMaxBytes     int64
}

// NewConfig returns the default configuration: the default limit policy,
// the compiler engine where wazero supports it, compiled modules cached in
// memory only.
func NewConfig() Config {
	return Config{
		limits:         airlock.DefaultLimitPolicy(),
		maxModuleBytes: DefaultMaxModuleBytes,
		compileTimeout: DefaultCompileTimeout,
		maxTable:       DefaultMaxTableElements,
		maxCompiled:    DefaultMaxCompiled,
		clockTick:      DefaultClockTick,
		kvMaxBytes:     DefaultKVMaxBytes,
	}
}

// WithLimits sets the operator's limit policy (defaults and maxima).
func (c Config) WithLimits(p airlock.LimitPolicy) Config { c.limits = p; return c }

// WithCacheDir keeps compiled machine code in dir as well as in memory, so
// that another process with the same wazero version starts warm. Empty
// turns the on-disk cache off (the default).
func (c Config) WithCacheDir(dir string) Config { c.cacheDir = dir; return c }

// WithMaxModuleBytes caps the size of a module's binary.
func (c Config) WithMaxModuleBytes(n int64) Config { c.maxModuleBytes = n; return c }

// WithCompileTimeout caps the time spent compiling one module (a job's wall
// clock caps it too).
func (c Config) WithCompileTimeout(d time.Duration) Config { c.compileTimeout = d; return c }

// WithMaxTableElements caps the elements of all the tables a module
// defines, together: larger declared minimums are refused, and table.grow
// beyond it fails.
func (c Config) WithMaxTableElements(n uint32) Config { c.maxTable = n; return c }

// WithMaxCompiled bounds the compiled modules kept in memory (least
// recently used first out).
func (c Config) WithMaxCompiled(n int) Config { c.maxCompiled = n; return c }

// WithClockTick sets how far the guest's pinned clocks advance on every
// read (they also advance by exactly the time a guest sleeps).
func (c Config) WithClockTick(d time.Duration) Config { c.clockTick = d; return c }

// WithHTTP sets the client that carries a guest's http_request after the
// tier has checked it against the job's network grants. Without one, every
// request is denied ("egress not wired").
func (c Config) WithHTTP(d HTTPDoer) Config { c.http = d; return c }

// WithEgress gives every run (a job, or a plugin call) with network rules
// an egress gateway of its own, built from cfg with the run's rules: the
// guest's http_request goes through it (host and method, private and
// metadata addresses refused after resolution, every redirect hop
// checked, every decision logged to cfg.Log with cfg.Job). cfg's
// listeners are ignored: the gateway serves in-process only. It takes
// precedence over WithHTTP.
func (c Config) WithEgress(cfg egress.Config) Config { c.egress = egresswire.Template(cfg); return c }

// doer returns the client for a run with these rules, and what to call
// when the run ends (it returns the gateway's decisions).
func (c *Config) doer(ctx context.Context, rules []airlock.NetRule) (HTTPDoer, func() []string, error) {
	if c.egress == nil || len(rules) == 0 {
		return c.http, func() []string { return nil }, nil
	}
	gw, err := egresswire.New(ctx, egresswire.ForRun(c.egress, "wasm", rules))
	if err != nil {
		return nil, nil, err
	}
	return gw.Client(), gw.Close, nil
}

// WithInterpreter selects wazero's interpreter instead of its compiler
// (slower, but needs no executable memory).
func (c Config) WithInterpreter(on bool) Config { c.interpreter = on; return c }

// WithKVMaxBytes caps the bytes (keys plus values, and 48 per entry) a
// plugin session's key-value store may hold.
func (c Config) WithKVMaxBytes(n int64) Config { c.kvMaxBytes = n; return c }

func (c Config) validate() error {
	switch {
	case c.maxModuleBytes <= 0:
		return jobs.Invalid("", "wasm config: max module bytes must be positive")
	case c.compileTimeout <= 0:
		return jobs.Invalid("", "wasm config: compile timeout must be positive")
	case c.maxTable == 0:
		return jobs.Invalid("", "wasm config: max table elements must be positive")
	case c.maxCompiled <= 0:
		return jobs.Invalid("", "wasm config: max compiled modules must be positive")
	case c.clockTick < 0:
		return jobs.Invalid("", "wasm config: clock tick must not be negative")
	case c.kvMaxBytes < 0:
		return jobs.Invalid("", "wasm config: key-value bytes must not be negative")
	case c.limits.Max.MemoryMB < 0 || c.limits.Default.MemoryMB < 0:
		return jobs.Invalid("", "wasm config: memory limits must not be negative")
	}
	return nil
}

// CacheDirEnv names the variable that sets the on-disk compilation cache
// of the command-line tool and the server ("off" turns it off).
const CacheDirEnv = "AIRLOCK_WASM_CACHE"

// DefaultCacheDir returns the on-disk compilation cache the command-line
// tool and the server use: $AIRLOCK_WASM_CACHE, or airlock/wasm under the
// user's cache directory; "" when turned off, or when there is no user's
// cache directory or it cannot be made (a user whose home does not
// exist): the cache only saves time, so the tier then compiles in memory.
// A directory it would use that is unsafe (another user's, or writable by
// others) is still returned, for the tier to refuse.
func DefaultCacheDir() string {
	switch d := os.Getenv(CacheDirEnv); d {
	case "off":
		return ""
	case "":
		base, err := os.UserCacheDir()
		if err != nil {
			return ""
		}
		dir := filepath.Join(base, "airlock", "wasm")
		if !statedir.Makeable(dir) {
			return ""
		}
		return dir
	default:
		return d
	}
}
