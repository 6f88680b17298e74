// Package microvm is airlock's hardware-virtualisation tier: each job runs
// in its own QEMU "microvm" machine with its own guest kernel (KVM where
// a guest boots under it, TCG emulation elsewhere), started cold, restored from a
// snapshot, or claimed from a pool of pre-booted VMs, and destroyed after
// the one job. A Firecracker backend takes over where a firecracker binary
// and KVM are present.
//
// The guest's /init is airlock's agent (tiers/microvm/cmd/airlock-agent):
// it receives the job over a virtio-serial port and sends back framed
// output and the exit status (package wire); the host parses nothing else.
//
// With an image resolver (Config.WithImages) the job's root is its image:
// a read-only EROFS disk per image digest that the agent mounts under an
// in-memory overlay and chroots the job into; the environment is the
// image's, then PATH, HOME=/scratch, TMPDIR=/tmp and LANG where it sets
// none, then the job's secrets; the image's user and working directory
// are not applied (uid 65534 in /scratch). See images.go.
//
// See docs/microvm.md for what the tier withholds and how that is tested.
package microvm

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/internal/collect"
	"github.com/airlock-sandbox/airlock/internal/jobs"
	"github.com/airlock-sandbox/airlock/internal/monotime"
	"github.com/airlock-sandbox/airlock/internal/statedir"
	"github.com/airlock-sandbox/airlock/internal/tools"
	"github.com/airlock-sandbox/airlock/internal/value"
	"github.com/airlock-sandbox/airlock/tiers/internal/admit"
	"github.com/airlock-sandbox/airlock/tiers/internal/frame"
	"github.com/airlock-sandbox/airlock/tiers/internal/warmpool"
	"github.com/airlock-sandbox/airlock/tiers/microvm/internal/wire"
)

// Name is the tier's name.
const Name = "microvm"

// Warm says how a VM is made ready for a job.
type Warm string

// The warm-start modes.
const (
	// WarmCold boots a fresh VM for every job.
	WarmCold Warm = "cold"
	// WarmSnapshot boots once, snapshots the VM as its agent waits for a
	// job, and restores that snapshot for every job.
	WarmSnapshot Warm = "snapshot"
)

// Guest memory beyond the job's own limit, for the guest kernel and agent.
const overheadMB = 96

// Config configures the tier. The zero value is not useful; start from
// [DefaultConfig]. Configs are immutable: With* methods return copies.
type Config struct {
	limits                      airlock.LimitPolicy
	qemu, kernel, rootfs, agent string
	stateDir, cacheDir          string
	warm                        Warm
	pool                        int
	imgPools                    map[string]int // per image reference, beside pool (the default's)
	vcpus                       int
	bootTimeout                 time.Duration
	sandbox                     bool
	accel                       string
	firecracker                 string
	egress                      *egress.Config // per-run template; nil: the defaults
	images                      image.Resolver // nil: the host view only
}

// DefaultConfig returns the defaults: the default limit policy, assets
// from the project's .tools directory, cold starts, one vCPU, QEMU's
// -sandbox on, KVM when /dev/kvm opens and a probe guest boots under it.
func DefaultConfig() Config {
	// Without a user's cache directory that can be made (a home that
	// does not exist), the temporary directory's.
	cache, err := os.UserCacheDir()
	if cache = filepath.Join(cache, "airlock", "microvm"); err != nil || !statedir.Makeable(cache) {
		cache = defaultStateDir(os.TempDir(), os.Geteuid()) + "-cache"
	}
	return Config{
		limits:      airlock.DefaultLimitPolicy(),
		stateDir:    defaultStateDir(os.TempDir(), os.Geteuid()),
		cacheDir:    cache,
		warm:        WarmCold,
		vcpus:       1,
		bootTimeout: 60 * time.Second,
		sandbox:     true,
		accel:       "auto",
	}
}

// defaultStateDir is the state directory of a tier run by uid: root's is
// TMP/airlock-microvm, every other user's TMP/airlock-microvm-UID (and the
// cache directory, without a home, the same name with "-cache"). A state
// directory must be its user's or root's (see statedir), so one shared
// name would let whichever user ran the tier first (an `airlock tiers`
// suffices) make it unusable for the others, root included.
func defaultStateDir(tmp string, uid int) string {
	if uid == 0 {
		return filepath.Join(tmp, "airlock-microvm")
	}
	return filepath.Join(tmp, "airlock-microvm-"+strconv.Itoa(uid))
}

// WithLimits sets the operator's limit policy.
func (c Config) WithLimits(p airlock.LimitPolicy) Config { c.limits = p; return c }

// WithQEMU sets the qemu-system-x86_64 binary.
func (c Config) WithQEMU(path string) Config { c.qemu = path; return c }

// WithKernel sets the uncompressed guest kernel (vmlinux).
func (c Config) WithKernel(path string) Config { c.kernel = path; return c }

// WithRootFS sets the directory the set-up script prepares (busybox,
// modules, their load order, the kernel release).
func (c Config) WithRootFS(dir string) Config { c.rootfs = dir; return c }

// WithAgent sets the static guest agent binary.
func (c Config) WithAgent(path string) Config { c.agent = path; return c }

// WithStateDir sets where running VMs keep their sockets and pid files.
func (c Config) WithStateDir(dir string) Config { c.stateDir = dir; return c }

// WithCacheDir sets where initramfs images are kept (snapshots live in
// memory).
func (c Config) WithCacheDir(dir string) Config { c.cacheDir = dir; return c }

// WithWarm sets the warm-start mode.
func (c Config) WithWarm(w Warm) Config { c.warm = w; return c }

// WithPool keeps n VMs booted and waiting for one job each (0: no pool).
func (c Config) WithPool(n int) Config { c.pool = n; return c }

// WithImagePool keeps n VMs of the image ref names booted and waiting,
// beside the default image's (WithPool); it needs an image store
// (WithImages). A pooled VM only ever serves a job of its own image (by
// digest). n = 0 removes ref's pool.
func (c Config) WithImagePool(ref string, n int) Config {
	c.imgPools = warmpool.WithSize(c.imgPools, ref, n)
	return c
}

// WithVCPUs sets the number of virtual CPUs per VM.
func (c Config) WithVCPUs(n int) Config { c.vcpus = n; return c }

// WithBootTimeout bounds how long a VM may take to become ready.
func (c Config) WithBootTimeout(d time.Duration) Config { c.bootTimeout = d; return c }

// WithSandbox turns QEMU's own seccomp sandbox (-sandbox on) on or off.
func (c Config) WithSandbox(on bool) Config { c.sandbox = on; return c }

// WithAccel forces "kvm" or "tcg" ("auto": KVM when /dev/kvm opens and a
// probe guest boots under it, TCG otherwise).
func (c Config) WithAccel(a string) Config { c.accel = a; return c }

// WithFirecracker sets the firecracker binary ("" : look it up).
func (c Config) WithFirecracker(path string) Config { c.firecracker = path; return c }

func (c Config) validate() error {
	switch {
	case c.warm != WarmCold && c.warm != WarmSnapshot:
		return fmt.Errorf("microvm: unknown warm-start mode %q (want cold or snapshot)", c.warm)
	case c.pool < 0 || c.pool > 64:
		return fmt.Errorf("microvm: pool size %d out of range 0-64", c.pool)
	case c.imgPools[""] != 0:
		return errors.New("microvm: an image pool needs an image reference (WithPool sizes the default image's)")
	case len(c.imgPools) > 0 && c.images == nil:
		return errors.New("microvm: an image pool needs an image store (WithImages)")
	case slices.ContainsFunc(slices.Collect(maps.Values(c.imgPools)), func(n int) bool { return n < 0 || n > 64 }):
		return errors.New("microvm: an image's pool size is out of range 0-64")
	case c.vcpus < 1 || c.vcpus > 64:
		return fmt.Errorf("microvm: %d vCPUs out of range 1-64", c.vcpus)
	case c.bootTimeout <= 0:
		return errors.New("microvm: boot timeout must be positive")
	case c.accel != "auto" && c.accel != "kvm" && c.accel != "tcg":
		return fmt.Errorf("microvm: unknown accelerator %q (want auto, kvm or tcg)", c.accel)
	case c.stateDir == "" || c.cacheDir == "":
		return errors.New("microvm: state and cache directories must be set")
	}
	return nil
}

// Tier runs command jobs in microVMs. It is safe for concurrent use; Close
// stops its pool.
type Tier struct {
	cfg      Config
	assets   *assets
	availErr error
	kvm      bool
	fc       string // the firecracker binary, when that backend is used
	// forwarder is this executable, which QEMU starts per guest
	// connection to the egress proxy ("" : net grants are refused).
	forwarder string
	tscKHz    int64
	// vmmUser: each QEMU runs as a user of its own (see vmmuser.go);
	// else as this process's user, for the reason in vmmWhy.
	vmmUser bool
	vmmWhy  string
	// vmmNS: each QEMU runs in network, IPC, UTS and PID namespaces of
	// its own (see qemuNamespaces): a tier run as root.
	vmmNS bool

	snapMu sync.Mutex
	snaps  map[vmKey]*snapshot // by guest memory size and image
	spares spares              // a VMM launched ahead for the next restore

	imgMu sync.Mutex
	held  map[string]*heldImage // the images the tier's runs, VMs and snapshots hold, by digest

	emptyMu  sync.Mutex
	emptyDir string // the empty placed-files directory (see emptyPlaced)

	pool    *warmpool.Pool[poolKey, *vm] // VMs of the configured images (see newPool)
	poolMu  sync.Mutex
	digests map[string]string // each pooled reference's digest, as its last VM started
	names   map[string]string // each pooled reference's image as named (the default's by its name)
	reapers sync.WaitGroup

	// observe, when set (by benchmarks), receives each used VM's guest
	// step timestamps as it is discarded.
	observe func([]wire.Mark)
}

var _ airlock.Tier = (*Tier)(nil)
var _ airlock.Prober = (*Tier)(nil)
var _ airlock.Pooler = (*Tier)(nil)

// New builds the tier. Missing QEMU, kernel or agent do not fail New: the
// tier then reports them from Available and refuses every job. New sweeps
// VMs orphaned by earlier processes from the state directory.
func New(cfg Config) (*Tier, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if _, err := statedir.Ensure(cfg.stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("microvm: %w", err)
	}
	if _, err := sweep(cfg.stateDir); err != nil {
		return nil, fmt.Errorf("sweeping orphaned VMs: %w", err)
	}
	t := &Tier{cfg: cfg, tscKHz: tools.TSCkHz(), snaps: map[vmKey]*snapshot{}}
	t.assets, t.availErr = findAssets(cfg)
	switch cfg.accel {
	case "kvm":
		t.kvm = true
	case "auto":
		// KVM where a guest really boots under it (see tools.KVMBoots),
		// emulation elsewhere.
		t.kvm = t.availErr == nil && tools.KVMBoots(t.assets.qemu, t.assets.kernel, cfg.cacheDir)
	}
	if exe, err := os.Executable(); err == nil {
		t.forwarder, _ = filepath.EvalSymlinks(exe)
	}
	if t.availErr == nil {
		t.vmmWhy = vmmUserBlocked(cfg.stateDir, t.assets.qemu)
		t.vmmUser = t.vmmWhy == ""
		t.vmmNS = os.Geteuid() == 0
	}
	if t.kvm && cfg.warm == WarmCold {
		fc := cfg.firecracker
		if fc == "" {
			fc, _ = tools.Find("firecracker")
		}
		t.fc = fc
	}
	if t.availErr == nil && (cfg.pool > 0 || len(cfg.imgPools) > 0) {
		t.pool = newPool(t)
	}
	return t, nil
}

// Name returns "microvm".
func (t *Tier) Name() string { return Name }

// Level returns [airlock.LevelVirtualisation].
func (t *Tier) Level() airlock.Level { return airlock.LevelVirtualisation }

// Available reports what is missing for the tier to run here.
func (t *Tier) Available() error {
	if t.availErr != nil {
		return fmt.Errorf("microvm: %w", t.availErr)
	}
	return nil
}

// Accelerator reports "kvm" or "tcg".
func (t *Tier) Accelerator() string {
	if t.kvm {
		return "kvm"
	}
	return "tcg"
}

// Backend reports the VMM in use: "firecracker" where its binary and KVM
// are present (and starts are cold or pooled), else "qemu".
func (t *Tier) Backend() string {
	if t.fc != "" {
		return "firecracker"
	}
	return "qemu"
}

// VMMUser says whom QEMU runs as: "a user of its own per VM" (a tier
// run as root whose state directory others may pass through), else this
// process's user and why.
func (t *Tier) VMMUser() string {
	if t.vmmUser {
		return "a user of its own per VM"
	}
	if t.vmmWhy == "" {
		return "this process's user"
	}
	return "this process's user (" + t.vmmWhy + ")"
}

// VMMNamespaces says which namespaces of its own each QEMU runs in.
func (t *Tier) VMMNamespaces() string {
	if t.vmmNS {
		return "network (loopback only), IPC, UTS and PID"
	}
	return "none of its own (not run as root)"
}

// GuestKernel returns the guest kernel's release.
func (t *Tier) GuestKernel() string {
	if t.assets == nil {
		return ""
	}
	return t.assets.release
}

// WaitWarm blocks until the tier's warm capacity is ready, or ctx ends: the
// snapshot exists (made now if need be) and a VMM waits to restore it
// when starts are restored from one, and every slot of the pool holds a VM waiting for its job. With cold
// starts and no pool it returns nil at once; an unavailable tier returns
// why.
func (t *Tier) WaitWarm(ctx context.Context) error {
	if err := t.Available(); err != nil {
		return err
	}
	if t.cfg.warm == WarmSnapshot {
		// The default image's: only it is made ready ahead of its jobs.
		h, err := t.defaultImage(ctx)
		if err != nil {
			return err
		}
		if h != nil {
			defer h.unref()
		}
		if _, err := t.snapshotFor(ctx, t.baseMem(), h); err != nil {
			return err
		}
		t.spares.ready(ctx, t, t.baseMem(), h)
	}
	if t.pool != nil {
		return t.waitPool(ctx)
	}
	return nil
}

// PoolStats returns the warm pool's counters (airlock.Pooler): the
// totals and, per image digest, each configured image's with the names
// that configured it; zero without a pool.
func (t *Tier) PoolStats() airlock.PoolStats {
	if t.pool == nil {
		return airlock.PoolStats{}
	}
	tot := airlock.PoolStats{Images: map[string]airlock.PoolStats{}}
	for _, k := range t.poolKeys() {
		st := t.pool.Stats(k).PoolStats()
		warmpool.Add(&tot, st)
		d, ok := t.poolDigest(k.ref)
		if !ok {
			continue // no VM started yet: its image is not known
		}
		if d == "" {
			d = image.Host
		}
		im := tot.Images[d] // two references naming one image: their sum
		im.Names = t.appendName(im.Names, k.ref)
		warmpool.Add(&im, st)
		tot.Images[d] = im
	}
	return tot
}

// Close stops the pool's VMs and removes the tier's snapshots (and its
// empty placed-files directory), releasing every image they held; the tier
// still runs jobs afterwards, starting them afresh.
func (t *Tier) Close() error {
	if t.pool != nil {
		t.pool.Close()
	}
	t.spares.close()
	t.reapers.Wait()
	t.dropSnapshots()
	t.dropEmptyPlaced()
	return nil
}

var (
	errKind      = "runs only command jobs"
	errNet       = "network grants need this executable as QEMU's egress forwarder, and it could not be located"
	errLifecycle = "runs ephemeral jobs only (one VM per job)"
)

// Admit accepts ephemeral command jobs; network grants are enforced by an
// egress gateway outside the VM, and host read paths are shown as
// snapshots (read-only, or writable copies) within the caps of read.go,
// at their guest paths.
func (t *Tier) Admit(job airlock.Job) error {
	reason := ""
	switch {
	case t.availErr != nil:
		reason = "unavailable: " + t.availErr.Error()
	case job.Kind != airlock.KindCommand:
		reason = errKind
	case len(job.Grants.Net) > 0 && t.forwarder == "":
		reason = errNet
	case job.Lifecycle != "" && job.Lifecycle != airlock.LifecycleEphemeral:
		reason = errLifecycle
	case admit.ExecTooLong(&job) != "":
		reason = admit.ExecTooLong(&job)
	default:
		if err := t.admitImage(job.Image); err != nil {
			return err
		}
		// Last: it reads the host's file system.
		if reason = admitReads(job.Grants.FS); reason == "" {
			return nil
		}
	}
	return &airlock.NotAdmitted{Tier: Name, Reason: reason}
}

// Run runs one job in a fresh (or freshly restored, or never used) VM and
// destroys the VM.
func (t *Tier) Run(ctx context.Context, job airlock.Job) (res airlock.Result, err error) {
	start := time.Now()
	res = airlock.Result{Tier: Name, Level: airlock.LevelVirtualisation}
	defer func() {
		res.Timings.TotalUS = max(monotime.Micros(start), res.Timings.StartUS+res.Timings.RunUS, 1)
		res.SetError(err)
	}()
	job, err = t.cfg.limits.Prepare(job)
	res.Clock, res.Seed = job.Clock, job.Seed
	if err != nil {
		return res, err
	}
	if err = t.Admit(job); err != nil {
		return res, err
	}
	h, digest, err := t.imageFor(ctx, job.Image)
	res.Image = digest
	if err != nil {
		return res, err
	}
	// From here the program's variables (env and secrets) travel as one.
	job.Grants.Secrets = admit.Vars(&job)
	if h != nil {
		t.follow(job.Image, digest) // a pooled name may have moved to a new image
		// Held until the VM, killed in the background, lets go of it too.
		defer h.unref()
		job.Grants.Secrets = imageEnv(h.img, job.Grants.Secrets)
	} else {
		// The host view has no image variables: the baseline, as on
		// every tier.
		job.Grants.Secrets = imageEnv(&image.Image{}, job.Grants.Secrets)
	}
	// Read grants become disks before the VM boots with them; they go
	// with the run's directory.
	var reads []readDisk
	if len(job.Grants.FS.Read) > 0 {
		if err := checkCopies(job.Grants.FS, scratchMB(&job)); err != nil {
			return res, err
		}
		dir, _, err := t.placedDir("read-")
		if err != nil {
			return res, fmt.Errorf("read grants: %w", err)
		}
		defer os.RemoveAll(dir)
		if reads, err = buildReads(ctx, dir, job.Grants.FS); err != nil {
			return res, err
		}
	}
	// The job is encoded, and its placed files checked, before a VM is
	// started: a refused job costs no VM, and a cold-booted VM is handed
	// its job as soon as QEMU is up, so the agent finds it waiting when it
	// has booted. (A job granted egress is encoded again, and checked
	// again, once its gateway exists: the frame then carries the network.)
	payload, err := t.jobFor(ctx, &job, nil, reads)
	if err != nil {
		return res, err
	}
	var early []byte
	if len(job.Grants.Net) == 0 {
		early = payload
	}
	v, err := t.acquire(ctx, &job, h, reads, early)
	res.Timings.StartUS = monotime.Micros(start)
	if v != nil {
		defer t.discard(v)
	}
	if err != nil {
		if ctx.Err() != nil {
			return res, &airlock.Stop{Reason: airlock.StopKilled, Detail: "cancelled while the VM started"}
		}
		return res, fmt.Errorf("starting microvm: %w", err)
	}
	if len(job.Grants.Net) > 0 {
		gw, n, netEnv, gerr := t.startEgress(ctx, v, &job)
		if gerr != nil {
			return res, gerr
		}
		// Closed (ending its connections) before the VM is discarded.
		defer func() { res.Decision = append(res.Decision, gw.Close()...) }()
		job.Grants.Secrets = withEnv(job.Grants.Secrets, netEnv)
		if payload, err = t.jobFor(ctx, &job, n, reads); err != nil {
			return res, err
		}
	}
	runStart := time.Now()
	err = t.converse(ctx, v, &job, payload, &res)
	res.Timings.RunUS = monotime.Micros(runStart)
	return res, err
}

// discard kills a used VM and removes its files at once; reaping the VMM
// (a VM's memory takes a while to unmap) happens in the background, and
// Close waits for it. A process that exits before then leaves only an
// already-killed VMM for init to reap.
func (t *Tier) discard(v *vm) {
	if t.observe != nil {
		t.observe(v.marks)
	}
	v.stop()
	_ = os.RemoveAll(v.dir)
	if v.claimed {
		t.pool.Done(v.pkey)
	}
	// The VM holds its image until it is reaped.
	t.reapers.Go(v.kill)
}

// memFor is the guest memory a job needs.
func memFor(job *airlock.Job) int64 { return job.Limits.MemoryMB + overheadMB }

// baseMem is the guest memory of every VM whose job fits the default
// memory limit: one size serves them all (the job's own limit is applied
// inside the guest, by its cgroup), so one snapshot and one pool do too.
func (t *Tier) baseMem() int64 { return t.cfg.limits.Default.MemoryMB + overheadMB }

// acquire returns a VM of image h (nil: the host view) whose agent waits
// for its job: from the pool, from a snapshot, or booted cold.
//
// payload, when set, is the encoded job: a cold-booted VM is handed it as
// soon as its VMM is up.
func (t *Tier) acquire(ctx context.Context, job *airlock.Job, h *heldImage, reads []readDisk, payload []byte) (*vm, error) {
	mem := max(memFor(job), t.baseMem())
	if len(job.Grants.Net) > 0 || len(reads) > 0 {
		// Pooled VMs and the snapshot have no network device and no
		// read-grant disks: a job granted either boots cold with them.
		return t.retry(ctx, func(ctx context.Context) (*vm, error) {
			return t.bootWith(ctx, vmSpec{memMB: mem, vcpus: t.cfg.vcpus, net: len(job.Grants.Net) > 0, img: h, reads: reads, job: payload})
		})
	}
	if t.pool != nil {
		if v := t.claim(mem, digestOf(h)); v != nil {
			return v, nil
		}
	}
	if t.cfg.warm == WarmSnapshot {
		return t.retry(ctx, func(ctx context.Context) (*vm, error) { return t.restore(ctx, mem, h) })
	}
	return t.retry(ctx, func(ctx context.Context) (*vm, error) {
		return t.bootWith(ctx, vmSpec{memMB: mem, vcpus: t.cfg.vcpus, job: payload, img: h})
	})
}

// retry replaces a guest that fails to come up (under emulation a boot
// can, rarely, hang) once; a tampered snapshot, an agent of another
// protocol version or a cancellation is not retried.
func (t *Tier) retry(ctx context.Context, start func(context.Context) (*vm, error)) (*vm, error) {
	v, err := start(ctx)
	if err == nil || ctx.Err() != nil || errors.Is(err, ErrSnapshotTampered) || errors.Is(err, ErrAgentVersion) {
		return v, err
	}
	if v != nil {
		v.kill()
	}
	return start(ctx)
}

// bootWith starts a VM of shape s cold and waits for its agent's Ready
// frame.
func (t *Tier) bootWith(ctx context.Context, s vmSpec) (*vm, error) {
	v, err := t.launch(ctx, s)
	if err != nil {
		return v, err
	}
	if s.job != nil {
		// QEMU reads the control socket only once the agent has opened
		// its port: the frame waits in the socket until then.
		v.send(s.job)
	}
	if err := v.awaitReady(ctx, t.cfg.bootTimeout); err != nil {
		return v, err
	}
	return v, nil
}

// ErrAgentVersion is wrapped by starts whose guest agent speaks another
// protocol version than the host (an agent built from other sources).
var ErrAgentVersion = errors.New("guest agent out of date")

// send writes the Job frame in the background (the guest may not read it
// yet); its outcome arrives on v.sent. Stopping the VM ends the write.
func (v *vm) send(payload []byte) {
	v.sent = make(chan error, 1)
	go func() { v.sent <- frame.Write(v.ctl, frame.Job, payload) }()
}

// awaitReady reads the agent's first frame, which must be Ready.
func (v *vm) awaitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = v.ctl.SetReadDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = v.ctl.SetReadDeadline(time.Now()) })
	defer stop()
	typ, payload, err := frame.Read(v.ctl)
	_ = v.ctl.SetReadDeadline(time.Time{})
	switch {
	case err != nil:
		return fmt.Errorf("waiting for the guest agent: %w (%s)", err, v.diag())
	case typ == frame.Fail:
		return fmt.Errorf("guest agent failed: %s", value.Line(string(payload), maxGuestText))
	case typ != frame.Ready:
		return fmt.Errorf("guest agent sent %q before ready", typ)
	}
	// The agent has run nothing of a job yet: its Ready is trusted to say
	// which protocol it speaks.
	var r wire.Ready
	if err := json.Unmarshal(payload, &r); err != nil || r.Version != wire.Version {
		return fmt.Errorf("%w: the guest agent speaks protocol version %d, the host %d: rebuild it (scripts/setup-microvm.sh)", ErrAgentVersion, r.Version, wire.Version)
	}
	if v.img != nil && r.Root != wire.RootImage {
		return fmt.Errorf("%w: the guest agent did not mount the image disk: rebuild it (scripts/setup-microvm.sh)", ErrAgentVersion)
	}
	if v.reads && !r.Reads {
		return fmt.Errorf("%w: the guest agent does not mount read grants: rebuild it (scripts/setup-microvm.sh)", ErrAgentVersion)
	}
	if v.copies && !r.Copies {
		return fmt.Errorf("%w: the guest agent does not mount copy grants writable: rebuild it (scripts/setup-microvm.sh)", ErrAgentVersion)
	}
	v.marks = r.Marks[:min(len(r.Marks), maxMarks)]
	return nil
}

// maxGuestText bounds what of a guest's own words (a Fail frame, its
// console) an error quotes, as one line (value.Line): the guest is on the
// far side of the boundary, and may have replaced its agent.
const maxGuestText = 512

// maxMarks bounds the guest's step timestamps a VM keeps.
const maxMarks = 64

// defaultScratchMB is the scratch a job gets when it asks for no size.
const defaultScratchMB = 64

// scratchMB is the job's scratch size in MiB.
func scratchMB(job *airlock.Job) int64 {
	if job.Grants.FS.ScratchMB == 0 {
		return defaultScratchMB
	}
	return job.Grants.FS.ScratchMB
}

// encodeJob is the Job frame's payload: the job as the agent receives it,
// with fresh entropy. It refuses jobs above the frame's bound.
func encodeJob(job *airlock.Job, n *wire.Net, reads []readDisk) ([]byte, error) {
	ent := make([]byte, 64)
	if _, err := rand.Read(ent); err != nil {
		return nil, err
	}
	scratch := scratchMB(job)
	var files map[string][]byte
	if len(job.Files) > 0 {
		files = make(map[string][]byte, len(job.Files))
		for name, data := range job.Files {
			files[name] = []byte(data)
		}
	}
	payload, err := json.Marshal(wire.Job{
		Argv: job.Argv, Env: job.Grants.Secrets, Files: files, Stdin: []byte(job.Stdin),
		Clock: job.Clock, Entropy: ent,
		MemoryMB: job.Limits.MemoryMB, CPUMS: job.Limits.CPUMS, Pids: job.Limits.Pids,
		OpenFiles: job.Limits.Files, ScratchMB: scratch, Spawn: job.Grants.Spawn, Net: n,
		Collect: job.Collect, Read: wireReads(reads),
	})
	if err != nil {
		return nil, err
	}
	if len(payload) > frame.MaxJob {
		return nil, jobs.Invalid("files", "job of %d bytes is above the microvm tier's %d", len(payload), frame.MaxJob)
	}
	return payload, nil
}

// wireReads are the read grants as the agent receives them.
func wireReads(reads []readDisk) []wire.Read {
	if len(reads) == 0 {
		return nil
	}
	out := make([]wire.Read, len(reads))
	for i, r := range reads {
		out[i] = r.Read
	}
	return out
}

type guestFrame struct {
	t   frame.Type
	p   []byte
	err error
}

// converse hands the job (its encoded payload, unless a cold boot already
// sent it) to the agent and collects frames until the Exit frame, a limit,
// or cancellation. Output beyond the cap stops the run.
func (t *Tier) converse(ctx context.Context, v *vm, job *airlock.Job, payload []byte, res *airlock.Result) error {
	frames := make(chan guestFrame, 16)
	readerDone := make(chan struct{})
	quit := make(chan struct{})
	// The reader runs ahead of the loop below (by the channel's 16
	// frames, while a slow client's stream holds the output sink), so it
	// takes only the frames the job calls for: a Job frame from the
	// guest, or a Files frame beyond the one a collecting job gets, each
	// up to 48 MiB, is refused from its header rather than read and held.
	files := len(job.Collect) > 0
	allow := func(t frame.Type) bool {
		switch t {
		case frame.Job:
			return false
		case frame.Files:
			ok := files
			files = false
			return ok
		}
		return true
	}
	go func() {
		defer close(readerDone)
		for {
			typ, p, err := frame.ReadAllowed(v.ctl, allow)
			select {
			case frames <- guestFrame{typ, p, err}:
			case <-quit:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	defer func() {
		close(quit)
		v.stop() // unblocks the reader
		<-readerDone
	}()
	if v.sent == nil {
		v.send(payload)
	}
	sent := v.sent
	wall := time.NewTimer(job.Limits.Wall())
	defer wall.Stop()
	var stdout, stderr []byte
	collected := false
	capBytes := job.Limits.OutputBytes
	sink := airlock.OutputSink(ctx)
	defer func() {
		res.Stdout, res.Stderr = string(stdout), string(stderr)
		res.Usage.OutputBytes = int64(len(stdout) + len(stderr))
	}()
	exited := v.done
	var drain <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return &airlock.Stop{Reason: airlock.StopKilled, Detail: "cancelled: " + context.Cause(ctx).Error()}
		case <-wall.C:
			return &airlock.Stop{Reason: airlock.StopTimeout, Detail: fmt.Sprintf("wall clock of %v ran out", job.Limits.Wall())}
		case err := <-sent:
			if err != nil {
				return fmt.Errorf("sending the job: %w (%s)", err, v.diag())
			}
			sent = nil
		case <-exited:
			// The agent waits for the host to hang up after its Exit frame
			// before it powers off; an exit seen first (a guest that died,
			// or an agent that powered off at once) leaves frames already
			// read through the VMM to read: read on briefly.
			exited = nil
			drain = time.After(2 * time.Second)
		case <-drain:
			return fmt.Errorf("the VM exited before the job finished: %s", v.diag())
		case f := <-frames:
			if f.err != nil {
				if exited == nil {
					return fmt.Errorf("the VM exited before the job finished: %s", v.diag())
				}
				return fmt.Errorf("reading from the guest: %w (%s)", f.err, v.diag())
			}
			switch f.t {
			case frame.Stdout, frame.Stderr:
				room := capBytes - int64(len(stdout)+len(stderr))
				p := f.p
				over := int64(len(p)) > room
				if over {
					p = p[:max(room, 0)]
				}
				stream := airlock.Stdout
				if f.t == frame.Stdout {
					stdout = append(stdout, p...)
				} else {
					stderr = append(stderr, p...)
					stream = airlock.Stderr
				}
				if sink != nil && len(p) > 0 {
					sink(stream, p)
				}
				if over {
					return &airlock.Stop{Reason: airlock.StopOutput, Detail: fmt.Sprintf("output exceeded %d bytes", capBytes)}
				}
			case frame.Files:
				// One, for a job that collects: each is up to 48 MiB of
				// JSON to decode, and a guest that sent them without end
				// would keep the host busy until the wall clock.
				if len(job.Collect) == 0 || collected {
					return fmt.Errorf("unexpected %q frame from the guest", f.t)
				}
				var w collect.Wire
				if err := json.Unmarshal(f.p, &w); err != nil {
					return fmt.Errorf("bad files frame from the guest: %w", err)
				}
				got := collect.Accept(w, job.Collect)
				res.Files, res.FilesSkipped, collected = got.Files, got.Skipped, true
			case frame.Exit:
				var ex wire.Exit
				if err := json.Unmarshal(f.p, &ex); err != nil {
					return fmt.Errorf("bad exit frame from the guest: %w", err)
				}
				if len(job.Collect) > 0 && !collected {
					res.FilesSkipped = append(res.FilesSkipped, "collect: the guest agent returned no files (an agent older than the collect field)")
				}
				// The guest is on the far side of the boundary: what it
				// reports is believed only within what a real exit
				// could say.
				switch {
				case ex.Code < 0 || ex.Code > 255:
					return fmt.Errorf("bad exit frame from the guest: exit code %d is outside 0-255", ex.Code)
				case ex.MemoryBytes < 0 || ex.CPUUS < 0:
					return fmt.Errorf("bad exit frame from the guest: negative usage")
				case ex.Reason != "" && ex.Reason != "memory" && ex.Reason != "cpu" && ex.Reason != "pids":
					return fmt.Errorf("bad exit frame from the guest: unknown stop reason %q", value.Clip(ex.Reason, 64))
				}
				res.ExitCode = ex.Code
				res.Usage.MemoryBytes, res.Usage.CPUUS = ex.MemoryBytes, ex.CPUUS
				if t.observe != nil && len(v.marks) < maxMarks {
					// Kept for benchmarks alone; a VM that serves a
					// session takes one exit per job.
					v.marks = append(v.marks, ex.Marks[:min(len(ex.Marks), maxMarks-len(v.marks))]...)
				}
				switch ex.Reason {
				case "memory":
					return &airlock.Stop{Reason: airlock.StopMemory, Detail: fmt.Sprintf("memory limit of %d MiB reached", job.Limits.MemoryMB)}
				case "cpu":
					return &airlock.Stop{Reason: airlock.StopCPU, Detail: fmt.Sprintf("CPU time exceeded %v", job.Limits.CPU())}
				case "pids":
					return &airlock.Stop{Reason: airlock.StopPids, Detail: fmt.Sprintf("process limit of %d reached", job.Limits.Pids)}
				}
				return nil
			case frame.Fail:
				if why, ok := strings.CutPrefix(string(f.p), wire.FailFilesFull); ok {
					return jobs.Invalid("files", "the files do not fit in the scratch (grants.fs.scratch_mb, %d MB): %s", job.Grants.FS.ScratchMB, value.Line(why, maxGuestText))
				}
				return fmt.Errorf("guest agent: %s", value.Line(string(f.p), maxGuestText))
			default:
				return fmt.Errorf("unexpected %q frame from the guest", f.t)
			}
		}
	}
}

// StateDirs returns the host directories the tier keeps its state and
// guest images in, which no job may be granted to read.
func (t *Tier) StateDirs() []string { return []string{t.cfg.stateDir, t.cfg.cacheDir} }
