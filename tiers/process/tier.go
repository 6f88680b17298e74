package process

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/internal/egresswire"
	"github.com/airlock-sandbox/airlock/internal/hostpath"
	"github.com/airlock-sandbox/airlock/internal/statedir"
	"github.com/airlock-sandbox/airlock/tiers/internal/admit"
	"github.com/airlock-sandbox/airlock/tiers/internal/warmpool"
	"github.com/airlock-sandbox/airlock/tiers/process/internal/stage"
)

// Tier names.
const (
	NameContainer = "process" // level 3
	NameFilter    = "seccomp" // level 2
)

// DefaultScratchMB is the scratch size when a job does not ask for one.
const DefaultScratchMB = 64

// Config configures a tier. It is immutable: With* methods return copies.
// The zero value is not useful; start from [NewConfig].
type Config struct {
	policy       airlock.LimitPolicy
	baseDir      string
	workspaceDir string
	uidBase      uint32
	uidCount     uint32
	poolSize     int
	imgPools     map[string]int // per image reference, beside poolSize (the default's)
	egress       *egress.Config
	stagePath    string
	images       image.Resolver
}

// NewConfig returns the defaults: airlock's default limit policy, state
// under the system temporary directory, persistent workspaces under the
// /var/lib/airlock/workspaces (the user cache directory when not root), host ids 1<<30 .. 1<<30+65535 for sandbox users,
// and no warm pool.
func NewConfig() Config {
	ws := "/var/lib/airlock/workspaces"
	if os.Geteuid() != 0 {
		if d, err := os.UserCacheDir(); err == nil {
			ws = filepath.Join(d, "airlock", "workspaces")
		}
	}
	return Config{
		policy:       airlock.DefaultLimitPolicy(),
		baseDir:      filepath.Join(os.TempDir(), "airlock-process"),
		workspaceDir: ws,
		uidBase:      1 << 30,
		uidCount:     1 << 16,
	}
}

// WithLimits sets the operator's limit policy.
func (c Config) WithLimits(p airlock.LimitPolicy) Config { c.policy = p; return c }

// WithBaseDir sets where scratch mounts of sessions and level-2 jobs live.
func (c Config) WithBaseDir(dir string) Config { c.baseDir = dir; return c }

// WithWorkspaceDir sets where persistent workspaces live.
func (c Config) WithWorkspaceDir(dir string) Config { c.workspaceDir = dir; return c }

// WithUIDRange sets the host uids (and gids) sandboxes run as: each job
// gets its own from [base, base+count).
func (c Config) WithUIDRange(base, count uint32) Config {
	c.uidBase, c.uidCount = base, count
	return c
}

// WithStageBinary makes every sandbox's first stage the airlock-stage
// binary at path (built from tiers/process/cmd/airlock-stage of this same
// source): New fails if it is missing, carries other stage code, or may be
// written by anyone but root or this process's user. The default ("") looks
// for airlock-stage next to the running executable and where the tools are
// found, and re-executes this binary when there is none; the separate
// binary starts a cold sandbox several times faster.
func (c Config) WithStageBinary(path string) Config { c.stagePath = path; return c }

// WithPool keeps n pre-started level-3 sandboxes of the default image
// ready (0: none).
func (c Config) WithPool(n int) Config { c.poolSize = n; return c }

// WithImagePool keeps n pre-started level-3 sandboxes of the image ref
// names ready, beside the default image's (WithPool); it needs an image
// store (WithImages). A pooled sandbox only ever serves a job of its own
// image (by digest). n = 0 removes ref's pool.
func (c Config) WithImagePool(ref string, n int) Config {
	c.imgPools = warmpool.WithSize(c.imgPools, ref, n)
	return c
}

// WithEgress sets the template of every net-granted job's egress gateway:
// the operator's pins (Hosts), the audit log (Log: every decision of every
// job, which also lands in the job's Result.Decision), origin roots, body
// caps and DNS rate. Listeners and rules in cfg are ignored (each job gets
// its own socket and brings its rules); an empty Job names each record
// after the sandbox. Without it, gateways use the defaults.
func (c Config) WithEgress(cfg egress.Config) Config { c.egress = egresswire.Template(cfg); return c }

// Tier runs command jobs in a container (level 3) or under the syscall
// filter alone (level 2).
type Tier struct {
	name  string
	level airlock.Level
	lv    isolation // what differs between the levels (see level.go)
	cfg   Config
	// parentMoves: the tier moves each stage into its cgroup (see
	// withParentMoves).
	parentMoves bool
	uids        *uidAllocator
	pool        *warmpool.Pool[poolKey, *sandbox]
	// images resolves jobs' images (the container tier's; nil: the host
	// view only).
	images image.Resolver
	// The pooled images' keys, once known (see poolRef).
	defLearn sync.Mutex // one learner at a time
	defMu    sync.Mutex
	refKeys  map[string]poolKey // each pooled reference's key ("": the default image)
	refNames map[string]string  // each pooled reference's image as named (the default's by its name)
	poolRefs map[poolKey]string // the reference each key's sandboxes acquire
	// stage is the configured stage binary; nil: discovered at the first
	// start (see stageBin).
	stage *stageBinary
	// etc is the containers' /etc template (see etcTemplate).
	etc etcTemplate
	// spawn starts containers (see spawner).
	spawn spawners
	// cgSpare is a cgroup made ahead for the next start.
	cgSpare spareCgroup

	// Used sandboxes are destroyed in the background, off the caller's
	// path; Close waits for them and reports what failed.
	cleanups   sync.WaitGroup
	cleanupMu  sync.Mutex
	cleanupErr []error
}

// New returns the level-3 container tier "process".
func New(cfg Config) (*Tier, error) { return newTier(NameContainer, airlock.LevelContainer, cfg) }

// NewFilter returns the level-2 tier "seccomp".
func NewFilter(cfg Config) (*Tier, error) {
	return newTier(NameFilter, airlock.LevelSyscallFilter, cfg)
}

func newTier(name string, lvl airlock.Level, cfg Config, opts ...option) (*Tier, error) {
	lv := levelFor(lvl)
	if cfg.baseDir == "" || !filepath.IsAbs(cfg.baseDir) {
		return nil, fmt.Errorf("process tier: base dir %q must be an absolute path", cfg.baseDir)
	}
	if cfg.uidCount == 0 || uint64(cfg.uidBase)+uint64(cfg.uidCount) > 1<<32-2 {
		return nil, fmt.Errorf("process tier: uid range %d+%d out of range", cfg.uidBase, cfg.uidCount)
	}
	if cfg.poolSize < 0 || cfg.poolSize > 64 {
		return nil, fmt.Errorf("process tier: pool size %d out of range 0-64", cfg.poolSize)
	}
	if (cfg.poolSize > 0 || len(cfg.imgPools) > 0) && !lv.warm() {
		return nil, fmt.Errorf("process tier: only the container tier has a pool")
	}
	for ref, n := range cfg.imgPools {
		switch {
		case ref == "":
			return nil, errors.New("process tier: an image pool needs an image reference (WithPool sizes the default image's)")
		case n < 0 || n > 64:
			return nil, fmt.Errorf("process tier: image %q: pool size %d out of range 0-64", ref, n)
		case cfg.images == nil:
			return nil, fmt.Errorf("process tier: image %q: an image pool needs an image store (WithImages)", ref)
		}
	}
	o := buildOptions(opts)
	t := &Tier{name: name, level: lvl, lv: lv, cfg: cfg, uids: sharedUIDs(cfg.uidBase, cfg.uidCount), parentMoves: o.parentMoves}
	if lv.ownFS() {
		t.images = cfg.images // the filter tier keeps the host view (see WithImages)
	}
	t.spawn.off = o.directStarts
	t.etc.watch = o.etcWatch
	if cfg.stagePath != "" {
		if _, err := os.Stat(cfg.stagePath); err != nil {
			return nil, fmt.Errorf("process tier: %w: %v", errNoStage, err)
		}
		sb, err := openStage(cfg.stagePath)
		if err != nil {
			return nil, fmt.Errorf("process tier: %w", err)
		}
		t.stage = sb
	}
	if t.Available() == nil {
		if _, err := statedir.Ensure(cfg.baseDir, 0o711); err != nil {
			return nil, fmt.Errorf("process tier: %w", err)
		}
		sweepOnce(cfg.baseDir)
		if refs := t.pooledRefs(); len(refs) > 0 {
			t.refKeys, t.refNames, t.poolRefs = map[string]poolKey{}, map[string]string{}, map[poolKey]string{}
			t.pool = newPool(poolKey{}, 0, t.startPooled,
				func(sb *sandbox) bool { return !exitedCh(sb.waitCh) },
				t.destroy, nil)
			// The images are resolved off the caller's path (they may be
			// pulled); a job that comes first starts cold.
			t.cleanups.Add(1)
			go func() {
				defer t.cleanups.Done()
				for _, ref := range refs {
					ctx, cancel := context.WithTimeout(context.Background(), poolStartTimeout)
					_, _ = t.poolRef(ctx, ref)
					cancel()
				}
			}()
		}
	}
	return t, nil
}

// Name returns "process" or "seccomp".
func (t *Tier) Name() string { return t.name }

// Level returns the tier's isolation level.
func (t *Tier) Level() airlock.Level { return t.level }

var (
	errNotCommand = "this tier runs command jobs only"
	errNet        = "shares the host's network namespace, so it cannot confine egress to the gateway: network grants need the process tier (level 3) or stronger"
)

// errGuestPath refuses a guest path that would cover what the container
// itself mounts: its root, its scratch (/scratch) or its /tmp.
const errGuestPath = "grants.fs.at: guest path %s would cover the container's root or scratch (/, /scratch, /tmp): not supported here"

// coveredGuestPath returns a guest path of at that is the root or is, or
// is beneath, /scratch or /tmp.
func coveredGuestPath(at map[string]string) (string, bool) {
	for _, g := range at {
		if g == "/" {
			return g, true
		}
		for _, p := range []string{"/scratch", "/tmp"} {
			if g == p || strings.HasPrefix(g, p+"/") {
				return g, true
			}
		}
	}
	return "", false
}

// hostShowsPlaced reports whether the host's own tree shows every placed
// read grant at its guest path: the guest path resolves, through its
// links, to the grant's real path. Copies are never shown.
func hostShowsPlaced(fs airlock.FSGrant) bool {
	if len(fs.Copy) > 0 {
		return false
	}
	for h, g := range fs.At {
		if real, err := hostpath.Real(g); err != nil || real != h {
			return false
		}
	}
	return true
}

// Admit accepts command jobs; network grants only at level 3, whose
// sandbox reaches the network only through the egress gateway.
func (t *Tier) Admit(job airlock.Job) error {
	return t.admit(job, !job.Clock.IsZero())
}

// admit is Admit for a job whose clock was pinned by its caller (pinned)
// or not: Run asks after preparing the job, which pins every clock.
func (t *Tier) admit(job airlock.Job, pinned bool) error {
	if job.Kind != airlock.KindCommand {
		return &airlock.NotAdmitted{Tier: t.name, Reason: errNotCommand}
	}
	if pinned {
		return &airlock.NotAdmitted{Tier: t.name, Reason: admit.ClockNotShown}
	}
	if admit.UsesFSPlacement(job.Grants.FS) {
		if !t.lv.ownFS() {
			// No mount namespace to place or copy a grant in, unless the
			// host's own tree shows each grant at its guest path already
			// (a grant named through a link, placed at the link).
			if !hostShowsPlaced(job.Grants.FS) {
				return &airlock.NotAdmitted{Tier: t.name, Reason: admit.FSPlacement}
			}
		} else if g, ok := coveredGuestPath(job.Grants.FS.At); ok {
			return &airlock.NotAdmitted{Tier: t.name, Reason: fmt.Sprintf(errGuestPath, g)}
		}
	}
	if len(job.Grants.Net) > 0 && !t.lv.ownNet() {
		return &airlock.NotAdmitted{Tier: t.name, Reason: errNet}
	}
	if why := admit.ExecTooLong(&job); why != "" {
		return &airlock.NotAdmitted{Tier: t.name, Reason: why}
	}
	return t.admitImage(&job)
}

var (
	availOnce sync.Once
	availErr  error
)

// Available reports whether this machine can run the tier: root (for
// cgroups, uid mapping and scratch mounts), cgroups, Landlock, seccomp and
// an executable image of this binary.
func (t *Tier) Available() error {
	availOnce.Do(func() { availErr = probe() })
	return availErr
}

func probe() error {
	if os.Geteuid() != 0 {
		return errors.New("needs root (per-job cgroups, uid mapping and scratch mounts)")
	}
	if err := cgroupAvailable(); err != nil {
		return err
	}
	if stage.LandlockABI() < 1 {
		return errors.New("Landlock is not enabled in this kernel")
	}
	for _, ns := range []string{"user", "pid", "mnt", "net", "ipc", "uts", "cgroup"} {
		if _, err := os.Stat("/proc/self/ns/" + ns); err != nil {
			return fmt.Errorf("%s namespaces are not supported: %w", ns, err)
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this executable: %w", err)
	}
	st, err := os.Stat(exe)
	if err != nil {
		return err
	}
	if st.Mode()&0o001 == 0 {
		return fmt.Errorf("%s is not executable by other users, so a sandbox cannot re-execute it", exe)
	}
	return nil
}

// Close stops the tier's pool, if any, and waits until every used sandbox
// is destroyed; it reports the clean-ups that failed. Sessions are closed
// by their owners.
func (t *Tier) Close() error {
	if t.pool != nil {
		t.pool.Close()
	}
	t.cleanups.Wait()
	t.cgSpare.close()
	t.spawn.close()
	t.cleanupMu.Lock()
	defer t.cleanupMu.Unlock()
	err := errors.Join(append(t.cleanupErr, t.etc.close())...)
	t.cleanupErr = nil
	return err
}

// WaitWarm blocks until the warm pool is full and no used sandbox is still
// being destroyed (airlock.Pooler); without a pool it returns at once.
func (t *Tier) WaitWarm(ctx context.Context) error {
	if t.pool == nil {
		return nil
	}
	for _, ref := range t.pooledRefs() {
		k, err := t.poolRef(ctx, ref)
		if err != nil {
			return err
		}
		if err := waitPool(ctx, t.pool, k); err != nil {
			return err
		}
	}
	return nil
}

var _ airlock.Pooler = (*Tier)(nil)

// PoolStats returns the warm pool's counters (airlock.Pooler): the totals
// and, per image digest ("host" for the host view), each configured
// image's, with the names that configured it; zero without a pool. An
// image not resolved yet counts in Size only.
func (t *Tier) PoolStats() airlock.PoolStats {
	if t.pool == nil {
		return airlock.PoolStats{}
	}
	tot := airlock.PoolStats{Images: map[string]airlock.PoolStats{}}
	for _, ref := range t.pooledRefs() {
		k, ok := t.known(ref)
		if !ok {
			tot.Size += t.sizeOf(ref)
			continue
		}
		name := k.digest
		if name == "" {
			name = image.Host
		}
		if st, done := tot.Images[name]; done {
			st.Names = appendName(st.Names, t.nameOf(ref))
			tot.Images[name] = st // two references naming one image
			continue
		}
		st := t.pool.Stats(k).PoolStats()
		st.Names = appendName(nil, t.nameOf(ref))
		tot.Images[name] = st
		warmpool.Add(&tot, st)
	}
	return tot
}

// discard destroys a used sandbox in the background: a pooled one through
// its pool (so WaitWarm sees it), any other on the tier's own account.
// Nothing is ever reused; by the time this runs, the sandbox's processes
// are dead (runJob empties its cgroup before it returns).
func (t *Tier) discard(sb *sandbox) {
	if sb.pooled && t.pool != nil {
		t.pool.Release(sb.key, sb)
		return
	}
	t.cleanups.Add(1)
	go func() {
		defer t.cleanups.Done()
		t.destroy(sb)
		// The next start's cgroup is made here, after this job has
		// returned, rather than beside that start's stage, where it would
		// take a CPU from it; with this job's limits, the likeliest.
		t.cgSpare.fill(t.cfg.baseDir, sb.limits)
	}()
}

// destroy destroys a sandbox, keeping a failure for Close to report.
func (t *Tier) destroy(sb *sandbox) {
	if err := sb.destroy(); err != nil {
		t.cleanupMu.Lock()
		t.cleanupErr = append(t.cleanupErr, err)
		t.cleanupMu.Unlock()
	}
}

// Run runs a command job.
func (t *Tier) Run(ctx context.Context, job airlock.Job) (airlock.Result, error) {
	return t.run(ctx, job, nil)
}

// StateDirs returns the host directories the tier keeps its state in
// (sandboxes, workspaces), which no job may be granted to read.
func (t *Tier) StateDirs() []string { return []string{t.cfg.baseDir, t.cfg.workspaceDir} }
