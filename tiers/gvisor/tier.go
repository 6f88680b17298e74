package gvisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/internal/deathsig"
	"github.com/airlock-sandbox/airlock/internal/hostpath"
	"github.com/airlock-sandbox/airlock/internal/jobs"
	"github.com/airlock-sandbox/airlock/internal/statedir"
	"github.com/airlock-sandbox/airlock/internal/tools"
	"github.com/airlock-sandbox/airlock/tiers/internal/admit"
	"github.com/airlock-sandbox/airlock/tiers/internal/execguard"
	"github.com/airlock-sandbox/airlock/tiers/internal/lease"
	"github.com/airlock-sandbox/airlock/tiers/internal/warmpool"
	"github.com/airlock-sandbox/airlock/tiers/process"
)

// Name is the tier's name.
const Name = "gvisor"

// Tier runs command jobs in gVisor sandboxes. It is safe for concurrent use.
// Close it to destroy the warm pool and give up its share of the directory.
type Tier struct {
	cfg    Config
	runsc  string
	avail  error  // why the tier cannot run jobs here, or nil
	base   string // real path of cfg.dir
	state  string // runsc --root, shared with the directory's other tiers
	rootfs string // the sandbox root, shared (see root.go)
	// rootLock holds a shared lock on rootfs for the tier's life.
	rootLock *os.File
	empty    string   // an empty directory: what a job without files placed
	mounts   []string // host directories bind-mounted read-only
	agent    string   // host path of the agent executable
	// guard finds the host path of the process tier's small stage binary,
	// which serves the exec guard without the agent's start-up ("": the
	// agent's own binary serves it).
	guard func() string
	pool  *warmpool.Pool[poolKey, *sandbox]

	// agentLaunch returns the argv before the agent's arguments in an
	// image, or why the agent cannot run in one (images.go).
	agentLaunch func() ([]string, error)

	pmu      sync.Mutex
	poolRefs map[poolKey]string // the reference each pool key's sandboxes acquire
	refKeys  map[string]poolKey // each pooled reference's key ("": the default image)
	refNames map[string]string  // each pooled reference's image as named (the default's by its name)
	defKey   poolKey            // the default image's key
	defSet   chan struct{}      // closed once the pooled images are known (or cannot be)
	defErr   error              // why some pooled image cannot be prewarmed

	stopPrewarm context.CancelFunc // ends prewarm's Acquire at Close

	owner      string        // the tier's name in the directory, which starts its sandbox ids
	lease      *lease.Owner  // owners/<owner>, locked while the tier lives
	seq        atomic.Uint64 // the last sandbox number
	disownOnce sync.Once

	bg sync.WaitGroup // background destroys

	mu       sync.Mutex
	sessions map[*session]struct{} // open sessions, closed by Close
	closed   bool                  // Close was called: no new runs or sessions
	active   int                   // runs and sessions in progress
}

var (
	_ airlock.Tier        = (*Tier)(nil)
	_ airlock.Prober      = (*Tier)(nil)
	_ airlock.SessionTier = (*Tier)(nil)
	_ airlock.Pooler      = (*Tier)(nil)
)

// New builds a tier. A missing runsc or kernel feature does not fail New:
// Available reports it and Run refuses jobs. Other tiers, in this process
// or others, may share cfg's directory: New builds the tier's own root
// there, sweeps what tiers that are gone left behind (sandboxes,
// directories, cgroups, roots) and, with a pool configured, starts filling
// the pool.
func New(cfg Config) (*Tier, error) {
	if cfg.dir == "" || !filepath.IsAbs(cfg.dir) {
		return nil, fmt.Errorf("gvisor: directory %q must be an absolute path", cfg.dir)
	}
	if cfg.pool < 0 || cfg.refill < 0 || cfg.cpus < 0 || cfg.readyTTL < 0 {
		return nil, errors.New("gvisor: pool size, refill, CPUs and ready TTL must not be negative")
	}
	for ref, n := range cfg.imgPools {
		switch {
		case ref == "":
			return nil, errors.New("gvisor: an image pool needs an image reference (WithPool sizes the default image's)")
		case n < 0:
			return nil, fmt.Errorf("gvisor: image %q: pool size must not be negative", ref)
		case cfg.images == nil:
			return nil, fmt.Errorf("gvisor: image %q: an image pool needs an image store (WithImages)", ref)
		}
	}
	if cfg.refill == 0 {
		cfg.refill = 1
	}
	if cfg.cpus == 0 {
		cfg.cpus = 1
	}
	if cfg.platform == "" {
		cfg.platform = "systrap"
	}
	if cfg.limits == (airlock.LimitPolicy{}) {
		cfg.limits = airlock.DefaultLimitPolicy()
	}
	t := &Tier{cfg: cfg}
	t.avail = t.init()
	if t.avail != nil {
		t.disown()
	}
	if t.avail == nil && (cfg.pool > 0 || len(cfg.imgPools) > 0) {
		t.pool = newPool(t, cfg.pool, cfg.refill, cfg.readyTTL)
		if cfg.images != nil {
			ctx, cancel := context.WithCancel(context.Background())
			t.stopPrewarm = cancel
			t.bg.Add(1)
			go func() {
				defer t.bg.Done()
				t.prewarm(ctx)
			}()
		}
	}
	return t, nil
}

func (t *Tier) init() error {
	var err error
	if t.runsc = t.cfg.runsc; t.runsc == "" {
		if t.runsc, err = tools.Find("runsc"); err != nil {
			return err
		}
	} else if st, err := os.Stat(t.runsc); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return fmt.Errorf("runsc %s: %w or not executable", t.runsc, tools.ErrNotFound)
	}
	if os.Geteuid() != 0 {
		return errors.New("runsc needs root (rootless sandboxes are not supported by this tier)")
	}
	if !exists(filepath.Join(cgroupRoot, "memory", "memory.limit_in_bytes")) {
		return errors.New("no cgroup v1 memory hierarchy at " + cgroupRoot + "/memory (cgroup v2 is not supported yet)")
	}
	// runsc needs a real path: a symbolic link in the root breaks its mounts.
	if t.base, err = statedir.Ensure(t.cfg.dir, 0o700); err != nil {
		return err
	}
	t.state = filepath.Join(t.base, "state")
	t.empty = filepath.Join(t.base, "empty")
	for _, d := range []string{t.state, t.empty, filepath.Join(t.base, "roots"), filepath.Join(t.base, "sb")} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return err
		}
	}
	if err := t.own(); err != nil {
		return err
	}
	// The root is shared by the directory's tiers and never written once
	// built (see root.go).
	entries, mounts, err := rootPlan(t.cfg.hostDirs)
	if err != nil {
		return fmt.Errorf("building the sandbox root: %w", err)
	}
	t.mounts = mounts
	if t.rootfs, t.rootLock, err = openRoot(filepath.Join(t.base, "roots"), t.ownDir(), entries); err != nil {
		return fmt.Errorf("building the sandbox root: %w", err)
	}
	if t.agent, err = os.Executable(); err == nil {
		t.agent, err = filepath.EvalSymlinks(t.agent)
	}
	if err != nil {
		return fmt.Errorf("locating the agent executable: %w", err)
	}
	// Worked out when an image's agent sandbox first needs it: reading
	// the executable's ELF headers costs a job without one about 1 ms.
	t.agentLaunch = sync.OnceValues(t.prepareAgent)
	// Found when an agent sandbox first needs it: a cold job without it
	// does not pay for the search and the binary's check.
	t.guard = sync.OnceValue(process.StageBinary)
	t.sweep()
	return nil
}

// Name returns "gvisor".
func (t *Tier) Name() string { return Name }

// Level returns airlock.LevelVirtualisation.
func (t *Tier) Level() airlock.Level { return airlock.LevelVirtualisation }

// Available reports whether runsc and the kernel features the tier needs
// are present.
func (t *Tier) Available() error { return t.avail }

// Admit accepts command jobs. Network grants are enforced by a per-job
// egress gateway outside the sandbox (see egress.go).
func (t *Tier) Admit(job airlock.Job) error {
	return t.admit(job, !job.Clock.IsZero())
}

// admit is Admit for a job whose clock was pinned by its caller (pinned)
// or not: the run paths ask after preparing the job, which pins every
// clock.
func (t *Tier) admit(job airlock.Job, pinned bool) error {
	if job.Kind != airlock.KindCommand {
		return &airlock.NotAdmitted{Tier: Name, Reason: "runs command jobs only, not " + string(job.Kind)}
	}
	if pinned {
		return &airlock.NotAdmitted{Tier: Name, Reason: admit.ClockNotShown}
	}
	if err := admitGuestPaths(job.Grants.FS); err != nil {
		return err
	}
	if why := admit.ExecTooLong(&job); why != "" {
		return &airlock.NotAdmitted{Tier: Name, Reason: why}
	}
	return t.admitImage(job.Image)
}

// admitGuestPaths refuses a read grant placed where the tier's own mounts
// are: over the whole root, the scratch or /tmp (the job's writable
// space), or the agent's directory.
func admitGuestPaths(fs airlock.FSGrant) error {
	for _, g := range fs.At {
		if g == "/" || g == "/tmp" || g == scratchDir || strings.HasPrefix(g, scratchDir+"/") || g == agentDir || strings.HasPrefix(g, agentDir+"/") {
			return &airlock.NotAdmitted{Tier: Name, Reason: fmt.Sprintf("grants.fs.at: guest path %s is the sandbox's own (/, %s, /tmp, %s)", g, scratchDir, agentDir)}
		}
	}
	return nil
}

// Close empties the warm pool, closes open sessions, waits for background
// clean-up and then removes the tier's root and releases its share of the
// directory. Runs and sessions started after Close fail. Call it once runs
// have returned: a run still in flight finishes, and the root is removed
// only after its clean-up. Close is safe to call more than once.
func (t *Tier) Close() error {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	if t.stopPrewarm != nil {
		t.stopPrewarm()
	}
	if t.pool != nil {
		t.pool.Close()
	}
	t.mu.Lock()
	open := make([]*session, 0, len(t.sessions))
	for s := range t.sessions {
		open = append(open, s)
	}
	t.mu.Unlock()
	var errs []error
	for _, s := range open {
		errs = append(errs, s.end("is closed: the tier was closed"))
	}
	t.bg.Wait()
	t.mu.Lock()
	idle := t.active == 0
	t.mu.Unlock()
	if idle {
		t.disown()
	} // otherwise the last run to finish does it (leave)
	return errors.Join(errs...)
}

// errClosed refuses runs and sessions after Close.
var errClosed = errors.New("gvisor: tier closed")

// enter counts a run or session starting; it refuses once Close was called.
func (t *Tier) enter() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return errClosed
	}
	t.active++
	return nil
}

// leave ends what enter counted. Once Close was called, the last to leave
// waits for background clean-up and gives up the tier's ownership.
func (t *Tier) leave() {
	t.mu.Lock()
	t.active--
	last := t.closed && t.active == 0
	t.mu.Unlock()
	if last {
		t.bg.Wait()
		t.disown()
	}
}

// Run runs a command job: in a pooled sandbox when one is ready, otherwise
// in a sandbox created for it.
func (t *Tier) Run(ctx context.Context, job airlock.Job) (airlock.Result, error) {
	r := begin()
	pinned := !job.Clock.IsZero()
	job, err := t.cfg.limits.Prepare(job)
	r.res.Clock, r.res.Seed = job.Clock, job.Seed
	if err != nil {
		return r.finish(err)
	}
	if err := t.admit(job, pinned); err != nil {
		return r.finish(err)
	}
	if t.avail != nil {
		return r.finish(fmt.Errorf("starting sandbox: %w", t.avail))
	}
	if err := t.enter(); err != nil {
		return r.finish(fmt.Errorf("starting sandbox: %w", err))
	}
	// Left after the run's sandbox is being destroyed (runCold and
	// runAgent start that in their own deferred calls).
	defer t.leave()
	if job.Lifecycle != airlock.LifecycleEphemeral {
		return r.finish(&airlock.NotAdmitted{Tier: Name, Reason: "lifecycle " + string(job.Lifecycle) + " needs a session (OpenSession)"})
	}
	// A read grant is bound as the path it names, never through a link
	// (runsc follows one, so it is refused here).
	for _, p := range job.Grants.FS.Read {
		if err := hostpath.Check(p); err != nil {
			return r.finish(jobs.Invalid("grants.fs.read", "%v", err))
		}
	}
	img, release, err := t.acquire(ctx, job.Image)
	if err != nil {
		return r.finish(err)
	}
	r.res.Image = digest(img)
	if sb := t.claimPooled(&job, img, release); sb != nil {
		return t.runAgent(ctx, sb, &job, r, true)
	}
	return t.runCold(ctx, &job, r, img, release)
}

// claimPooled claims a pooled sandbox of img for job, or returns nil.
// Pooled sandboxes were created before the job: they carry no read
// grants, which are mounts, and no scratch cap, a mount option, so a job
// with either starts cold. A pooled sandbox holds its own image: on a
// claim the job's hold (release) ends here.
func (t *Tier) claimPooled(job *airlock.Job, img *image.Image, release func()) *sandbox {
	if t.pool == nil {
		return nil
	}
	if img != nil {
		t.follow(job.Image, img) // a pooled reference may name a new image now
	}
	if len(job.Grants.FS.Read) > 0 || job.Grants.FS.ScratchMB > 0 {
		return nil
	}
	sb, ok := t.pool.Claim(poolKey{digest(img)}, nil)
	if !ok {
		return nil
	}
	release()
	sb.claimed = true
	return sb
}

// run tracks one job's result and timings.
type run struct {
	res     airlock.Result
	start   time.Time
	started time.Time
}

func begin() *run {
	return &run{res: airlock.Result{Tier: Name, Level: airlock.LevelVirtualisation}, start: time.Now()}
}

// ready marks the sandbox ready and the job's code starting.
func (r *run) ready() {
	r.started = time.Now()
	r.res.Timings.StartUS = r.started.Sub(r.start).Microseconds()
}

func (r *run) finish(err error) (airlock.Result, error) {
	now := time.Now()
	if !r.started.IsZero() {
		r.res.Timings.RunUS = now.Sub(r.started).Microseconds()
	}
	r.res.Timings.TotalUS = max(now.Sub(r.start).Microseconds(), 1)
	r.res.SetError(err)
	return r.res, err
}

// sandboxDir creates the per-sandbox directory.
func (t *Tier) sandboxDir(id string) (string, error) {
	dir := filepath.Join(t.base, "sb", id)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", fmt.Errorf("creating sandbox directory: %w", err)
	}
	return dir, nil
}

func (t *Tier) newBundle(id string, job *airlock.Job, img *image.Image) *bundle {
	b := &bundle{
		rootfs:   t.rootfs,
		hostDirs: t.mounts,
		cwd:      scratchDir,
		uid:      sandboxUID,
		cgroup:   "/" + id,
		limits:   job.Limits,
		cpus:     t.cfg.cpus,
		grants:   job.Grants.FS,
	}
	t.setImage(b, img)
	return b
}

// runCold creates a sandbox for the job with `runsc run`, the job's program
// as its first process.
//
// A job with a net grant runs in a sandbox created for it whose first
// process is the agent instead, which runs the egress forwarder; so does
// a job that collects files, which the agent reads from the sandbox's
// scratch (a memory-backed overlay the host cannot see) once it ends; a
// job with a scratch cap, whose scratch and /tmp are tmpfs of that size
// (the host directory a direct start binds gets an overlay without one);
// and a job with a copy grant, which the agent hands to the job's user
// before the program starts.
//
// runCold takes over the job's hold on img: it ends once the sandbox is
// destroyed.
func (t *Tier) runCold(ctx context.Context, job *airlock.Job, r *run, img *image.Image, release func()) (airlock.Result, error) {
	if needsAgent(job) {
		sb, err := t.newAgentSandbox(modeOnce, job.Grants.FS, img, release)
		if err != nil {
			return r.finish(err)
		}
		return t.runAgent(ctx, sb, job, r, true)
	}
	id := t.newID()
	dir, err := t.sandboxDir(id)
	if err != nil {
		release()
		return r.finish(err)
	}
	cg := cgroup{path: "/" + id}
	live := false
	// Clean-up runs after the result is returned (Close waits for it): the
	// cgroup can stay busy for a moment while runsc's processes exit.
	defer func() {
		t.bg.Add(1)
		go func() {
			defer t.bg.Done()
			if err := t.destroy(id, dir, live); err != nil {
				logf("%v", err)
			}
			release()
		}()
	}()
	args, err := t.prepareDirect(ctx, job, img, id, dir)
	if err != nil {
		return r.finish(err)
	}

	out := newOutput(ctx, job.Limits.OutputBytes)
	out.holdErr = true
	var replaced string // the Result's stderr in place of runsc's report
	defer func() { out.release(replaced) }()
	cmd := exec.Command(t.runsc, args...)
	if job.Stdin != "" { // otherwise /dev/null: EOF, and no copying goroutine
		cmd.Stdin = strings.NewReader(job.Stdin)
	}
	// The output pipes are the tier's own, read until the sandbox is gone
	// (see pipeOut), not exec's, which stop being read five seconds after
	// runsc exits: output a slow sink still held was cut, and the run failed.
	po, err := newPipeOut(out)
	if err != nil {
		return r.finish(fmt.Errorf("starting sandbox: %w", err))
	}
	defer po.close()
	cmd.Stdout, cmd.Stderr = po.w[0], po.w[1]
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = 5 * time.Second
	wait, err := deathsig.Start(cmd)
	po.started()
	if err != nil {
		return r.finish(fmt.Errorf("starting sandbox: %w", err))
	}
	live = true
	r.ready()
	exited := make(chan struct{})
	w := t.watch(ctx, id, cg, job.Limits, out, exited, func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	})
	werr := wait()
	po.drain()
	close(exited)
	stop := w.done()
	r.res.Stdout, r.res.Stderr = out.strings()
	r.res.Usage = usage(cg, out)
	if stop == nil && cg.ooms() > 0 {
		stop = &airlock.Stop{Reason: airlock.StopMemory, Detail: fmt.Sprintf("memory limit of %d MiB reached", job.Limits.MemoryMB)}
	}
	if stop == nil && cg.pidsHits() > 0 {
		stop = stopPids(job)
	}
	if stop != nil {
		return r.finish(stop)
	}
	var exit *exec.ExitError
	switch {
	case errors.As(werr, &exit):
		r.res.ExitCode = exit.ExitCode()
		if r.res.ExitCode < 0 {
			return r.finish(fmt.Errorf("running sandbox: runsc %v", exit))
		}
		// runsc reports a program it cannot find with 128; a shell (and the
		// agent of a pooled sandbox) says 127.
		// runsc's own message names its internals: the job gets the
		// line the other tiers give.
		if r.res.ExitCode == 128 {
			if err, ok := runscStartFailure(r.res.Stderr); ok {
				code, line, _ := execguard.StartFailure(job.Argv[0], err)
				r.res.ExitCode, r.res.Stderr = code, line+"\n"
				replaced = r.res.Stderr
			}
		}
		live = false
	case werr != nil:
		return r.finish(fmt.Errorf("running sandbox: %w", werr))
	default:
		live = false
	}
	return r.finish(nil)
}

// prepareDirect makes ready a sandbox whose first process is the job's
// program: the job's files in its scratch (checked), its bundle in dir, and
// its cgroup with the job's limits. It returns runsc's arguments. What it
// made is left for destroy, also on error.
func (t *Tier) prepareDirect(ctx context.Context, job *airlock.Job, img *image.Image, id, dir string) ([]string, error) {
	scratch := filepath.Join(dir, "scratch")
	if err := writeFiles(scratch, job.Files, sandboxUID); err != nil {
		return nil, err
	}
	// What was placed is checked (approvals recompute their digest over
	// it) before the sandbox starts.
	if err := airlock.CheckPlaced(ctx, scratch); err != nil {
		return nil, err
	}
	b := t.newBundle(id, job, img)
	b.args = job.Argv
	b.env = envFor(img, admit.Vars(job))
	// Without the spawn grant the program is the sandbox's first process
	// under a seccomp filter that refuses any later execve.
	b.noExec = !job.Grants.Spawn
	b.scratch = scratch
	if err := b.write(dir); err != nil {
		return nil, err
	}
	cg := cgroup{path: "/" + id}
	if err := cg.create(); err != nil {
		return nil, fmt.Errorf("starting sandbox: %w", err)
	}
	if err := cg.set(cgroupLimits(job.Limits, t.cfg.cpus)); err != nil {
		return nil, fmt.Errorf("starting sandbox: %w", err)
	}
	args := t.runscFlags(false, job.Grants.FS.ScratchMB)
	if b.noExec {
		args = append(args, "--oci-seccomp")
	}
	return append(args, "run", "--bundle", dir, id), nil
}

// needsAgent says whether a cold job starts with the agent as the
// sandbox's first process (see runCold).
func needsAgent(job *airlock.Job) bool {
	return len(job.Grants.Net) > 0 || len(job.Collect) > 0 || job.Grants.FS.ScratchMB > 0 || len(job.Grants.FS.Copy) > 0
}

// runscNotFound is in what runsc writes for a program it cannot find.
const runscNotFound = "error finding executable"

// runscStartFailure reads what runsc wrote for a program it could not
// start (with exit status 128) as the error it names: a bare name it
// did not find, or a path it could not load.
func runscStartFailure(stderr string) (error, bool) {
	if strings.Contains(stderr, runscNotFound) {
		return syscall.ENOENT, true
	}
	_, rest, ok := strings.Cut(stderr, "creating process: failed to load ")
	if !ok {
		return nil, false
	}
	rest = strings.TrimSpace(rest)
	for _, en := range []syscall.Errno{syscall.ENOENT, syscall.ENOTDIR, syscall.EACCES, syscall.EPERM, syscall.ENOEXEC,
		syscall.EISDIR, syscall.ELOOP, syscall.ENAMETOOLONG, syscall.ETXTBSY, syscall.E2BIG, syscall.ELIBBAD} {
		if strings.HasSuffix(rest, ": "+en.Error()) {
			return en, true
		}
	}
	return nil, false
}

// stopPids is the stop for a fork the process limit refused: it stops the
// job on every tier, whatever the program made of the failed fork.
func stopPids(job *airlock.Job) *airlock.Stop {
	return &airlock.Stop{Reason: airlock.StopPids, Detail: fmt.Sprintf("process limit of %d reached", job.Limits.Pids)}
}

func usage(cg cgroup, out *output) airlock.Usage {
	return airlock.Usage{MemoryBytes: cg.maxMemory(), CPUUS: cg.cpuTime().Microseconds(), OutputBytes: out.total()}
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "airlock gvisor: "+format+"\n", args...)
}

// StateDirs returns the host directories the tier keeps its state in,
// which no job may be granted to read.
func (t *Tier) StateDirs() []string { return []string{t.cfg.dir, t.base} }
