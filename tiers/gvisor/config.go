package gvisor

import (
	"os"
	"path/filepath"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/internal/egresswire"
	"github.com/airlock-sandbox/airlock/tiers/internal/warmpool"
)

// Config configures the tier. The zero value is usable; With* methods
// return modified copies and never fail: settings are checked by [New].
type Config struct {
	runsc    string
	dir      string
	platform string
	limits   airlock.LimitPolicy
	cpus     float64
	pool     int
	refill   int
	imgPools map[string]int // per image reference, beside pool (the default's)
	readyTTL time.Duration
	hostDirs []string
	images   image.Resolver
	// egress
	egress *egress.Config
}

// NewConfig returns the default configuration: runsc found through
// internal/tools (AIRLOCK_RUNSC, .tools/bin, $PATH), state under the
// system's temporary directory, the systrap platform, airlock's default
// limit policy, one CPU per sandbox, and no warm pool.
func NewConfig() Config {
	return Config{
		dir:      filepath.Join(os.TempDir(), "airlock-gvisor"),
		platform: "systrap",
		limits:   airlock.DefaultLimitPolicy(),
		cpus:     1,
		refill:   1,
		hostDirs: []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/usr"},
	}
}

// WithRunsc sets the runsc binary (default: found through the project's
// tools directory, AIRLOCK_RUNSC or $PATH).
func (c Config) WithRunsc(path string) Config { c.runsc = path; return c }

// WithDir sets the directory holding runsc's state, each tier's read-only
// root and one directory per sandbox. Any number of tiers, in one process
// or several, may share it (the default is shared by every airlock process
// on the machine): none touches what a live one uses, and what tiers that
// are gone left behind is swept from it when a tier is built.
func (c Config) WithDir(dir string) Config { c.dir = dir; return c }

// WithPlatform sets gVisor's platform (default systrap; kvm needs /dev/kvm).
func (c Config) WithPlatform(p string) Config { c.platform = p; return c }

// WithLimits sets the operator's limit policy.
func (c Config) WithLimits(p airlock.LimitPolicy) Config { c.limits = p; return c }

// WithCPUs caps the CPU bandwidth of each sandbox, in cores (default 1).
func (c Config) WithCPUs(n float64) Config { c.cpus = n; return c }

// WithPool keeps n unused sandboxes ready (0, the default, disables the
// pool), created at most refill at a time (default 1).
func (c Config) WithPool(n, refill int) Config { c.pool = n; c.refill = refill; return c }

// WithImagePool keeps n unused sandboxes of the image ref names ready,
// beside the default image's (WithPool; its refill applies). It needs an
// image store (WithImages). A pooled sandbox only ever serves a job of its
// own image (by digest); two references naming one image share a pool,
// sized to the larger of their sizes. n = 0 removes ref's pool.
func (c Config) WithImagePool(ref string, n int) Config {
	c.imgPools = warmpool.WithSize(c.imgPools, ref, n)
	return c
}

// WithReadyTTL recycles pooled sandboxes that sat unused for longer than
// ttl (0, the default: keep them until claimed or the tier closes).
func (c Config) WithReadyTTL(ttl time.Duration) Config { c.readyTTL = ttl; return c }

// WithHostDirs sets the host directories mounted read-only into every
// sandbox of the host view, none into an image's (default: /bin, /sbin,
// /lib*, /usr; missing ones are skipped, symbolic links are reproduced as
// links).
func (c Config) WithHostDirs(dirs ...string) Config {
	c.hostDirs = append([]string(nil), dirs...)
	return c
}

// WithEgress sets the template of every net-granted job's egress gateway:
// the operator's pins (Hosts), the audit log (Log: every decision of every
// job, which also lands in the job's Result.Decision), origin roots, body
// caps and DNS rate. Listeners and rules in cfg are ignored (each job gets
// its own socket and brings its rules); an empty Job names each record
// after the sandbox. Without it, gateways use the defaults.
func (c Config) WithEgress(cfg egress.Config) Config { c.egress = egresswire.Template(cfg); return c }

// WithImages sets the store jobs' images come from (Job.Image): each
// sandbox's root is then its job's image, read-only, instead of the host's
// program directories (see the package documentation). Without one, only
// jobs naming no image or image.Host are admitted, and they run the host
// view.
func (c Config) WithImages(r image.Resolver) Config { c.images = r; return c }
