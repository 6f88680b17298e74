package process

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/internal/collect"
	"github.com/airlock-sandbox/airlock/internal/egresswire"
	"github.com/airlock-sandbox/airlock/internal/hostpath"
	"github.com/airlock-sandbox/airlock/internal/jobs"
	"github.com/airlock-sandbox/airlock/internal/monotime"
	"github.com/airlock-sandbox/airlock/tiers/internal/admit"
	"github.com/airlock-sandbox/airlock/tiers/internal/attachio"
	"github.com/airlock-sandbox/airlock/tiers/internal/frame"
	"github.com/airlock-sandbox/airlock/tiers/process/internal/stage"
	"golang.org/x/sys/unix"
)

// run is Run, optionally inside a session (whose scratch and uid it reuses).
func (t *Tier) run(ctx context.Context, job airlock.Job, sess *Session) (airlock.Result, error) {
	begin := time.Now()
	res := airlock.Result{Tier: t.name, Level: t.level}
	finish := func(err error) (airlock.Result, error) {
		res.Timings.TotalUS = max(monotime.Micros(begin), 1)
		res.SetError(err)
		return res, err
	}
	pinned := !job.Clock.IsZero()
	job, err := t.cfg.policy.Prepare(job)
	res.Clock, res.Seed = job.Clock, job.Seed
	if err != nil {
		return finish(err)
	}
	if err := t.admit(job, pinned); err != nil {
		return finish(err)
	}
	if sess != nil && job.Grants.FS.ScratchMB > 0 {
		// The session's scratch was made when it opened (a tmpfs of
		// DefaultScratchMB, or a workspace's directory): a run cannot
		// give it another cap, as on gVisor.
		return finish(&airlock.NotAdmitted{Tier: t.name, Reason: "grants.fs.scratch_mb cannot be applied to a running session (its scratch was made when the session opened)"})
	}
	if err := t.Available(); err != nil {
		return finish(fmt.Errorf("starting sandbox: tier unavailable: %w", err))
	}
	// A read grant is bound as the path it names, never through a link:
	// what was checked and approved is what is mounted.
	for _, p := range job.Grants.FS.Read {
		if err := hostpath.Check(p); err != nil {
			return finish(jobs.Invalid("grants.fs.read", "%v", err))
		}
	}
	img, releaseImage, err := t.jobImage(ctx, job.Image, sess)
	if err != nil {
		return finish(err)
	}
	if img == nil || img.IsHost() {
		if err := hostViewGuests(job.Grants.FS.At); err != nil {
			return finish(err)
		}
	}
	if img != nil {
		res.Image = img.Digest
		defer func() {
			if releaseImage != nil {
				releaseImage()
			}
		}()
	}
	key := poolKey{}
	if img != nil {
		key.digest = img.Digest
		if sess == nil {
			t.follow(job.Image, img) // a pooled name may have moved to a new image
		}
	}
	scratchMB := job.Grants.FS.ScratchMB
	if scratchMB == 0 {
		scratchMB = DefaultScratchMB
	}
	wall := job.Limits.Wall()
	ctx, cancel := context.WithTimeoutCause(ctx, wall, errWall)
	defer cancel()

	var sb *sandbox
	if t.pool != nil && sess == nil && len(job.Grants.FS.Read) == 0 && len(job.Collect) == 0 && t.pooled(key) {
		sb = t.claim(key, &job, &res)
		defer t.pool.Done(key) // the replacement starts once the job is over
	}
	if sb == nil {
		o := t.coldOptions(ctx, &job, sess, img, releaseImage, scratchMB)
		releaseImage = nil // the sandbox's now
		if sb, err = t.start(ctx, o); err != nil {
			if context.Cause(ctx) == errWall {
				err = &airlock.Stop{Reason: airlock.StopTimeout, Detail: "wall clock ran out while starting the sandbox"}
			}
			return finish(err)
		}
	}
	err = t.runIn(ctx, sb, &job, scratchMB, begin, &res)
	if sess == nil {
		r, err := finish(err)
		t.discard(sb) // after the timings: destroying is not the job's
		return r, err
	}
	// The session's next run reuses its uid and scratch: clean up now, and
	// say in the result if that failed.
	if cerr := sb.destroy(); cerr != nil {
		res.Decision = append(res.Decision, "cleanup: "+cerr.Error())
	}
	return finish(err)
}

// runIn runs job in the started sb, behind its egress gateway when it has
// a net grant, and puts what came of it in res.
func (t *Tier) runIn(ctx context.Context, sb *sandbox, job *airlock.Job, scratchMB int64, begin time.Time, res *airlock.Result) error {
	var (
		gw     *egresswire.Gateway
		netEnv []string
	)
	if len(job.Grants.Net) > 0 {
		if sb.egressDir == "" {
			return errors.New("starting sandbox: no egress directory bound")
		}
		jg, env, err := t.startGateway(ctx, sb, job)
		if err != nil {
			return err
		}
		// Closed before sb.destroy (deferred by run) on every path: the
		// gateway, then its socket, then the sandbox and its directory.
		defer jg.Close()
		gw, netEnv = jg, env
	}
	res.Timings.StartUS = monotime.Micros(begin)
	out, err := sb.runJob(ctx, job, scratchMB, netEnv)
	if gw != nil {
		res.Decision = append(res.Decision, gw.Close()...)
	}
	res.Stdout, res.Stderr = string(out.stdout), string(out.stderr)
	res.ExitCode = out.exit
	// The output kept, as every tier counts it: at most the cap, however
	// much the program wrote past it before it was stopped.
	outBytes := out.outBytes
	if c := job.Limits.OutputBytes; c > 0 {
		outBytes = min(outBytes, c)
	}
	res.Usage = airlock.Usage{MemoryBytes: out.memPeak, CPUUS: out.cpuUS, OutputBytes: outBytes}
	res.Timings.RunUS = out.runUS
	if len(job.Collect) > 0 {
		// The program has ended (or was stopped): its scratch is read from
		// the host, before the sandbox and its mount go.
		res.Files, res.FilesSkipped = collectFiles(sb.scratch, job.Collect)
	}
	return err
}

// hostViewGuests refuses, in the host view, a guest path that lies in a
// host directory the sandbox shows (/usr, /lib…) and does not exist there:
// its mount point cannot be made in the host's directory.
func hostViewGuests(at map[string]string) error {
	for _, g := range at {
		if d, ok := stage.HostViewDir(g); ok {
			if _, err := os.Lstat(g); os.IsNotExist(err) {
				return jobs.Invalid("grants.fs.at", "guest path %s does not exist in %s, which the sandbox shows from the host: choose a guest path that exists there, or one outside it", g, d)
			}
		}
	}
	return nil
}

// jobImage is the job's image (nil: the host view without a resolver): a
// session's, held for its life, or acquired here, with the function that
// gives it back, to be held by the sandbox that runs the job (a pooled
// one holds its own).
func (t *Tier) jobImage(ctx context.Context, ref string, sess *Session) (img *image.Image, release func(), err error) {
	if t.images == nil {
		return nil, nil, nil
	}
	if sess != nil {
		img, err = sess.imageFor(ctx, ref)
	} else if img, release, err = t.images.Acquire(ctx, ref); err != nil {
		err = imageError(err)
	}
	return img, release, err
}

// claim takes a sandbox of key's pool for job, if one is ready, and binds
// the job's limits to it (unless it already has them). One that cannot
// take them — v1 refuses a memory limit below what the group already
// holds — is discarded, the decision noted in res, and the job starts
// cold (nil).
func (t *Tier) claim(key poolKey, job *airlock.Job, res *airlock.Result) *sandbox {
	sb, ok := t.pool.Claim(key, nil)
	if !ok {
		return nil
	}
	sb.pooled = true
	if l := cgLimitsFor(job.Limits); l != sb.limits {
		if err := sb.cg.update(l); err != nil {
			t.discard(sb)
			res.Decision = append(res.Decision, "pool: the claimed sandbox could not take the job's limits ("+limitRefusal(err)+"); started cold")
			return nil
		}
		sb.limits = l
	}
	return sb
}

// coldOptions are the start options of a sandbox started for job (in
// sess, if not nil), which gets the image and its release.
func (t *Tier) coldOptions(ctx context.Context, job *airlock.Job, sess *Session, img *image.Image, releaseImage func(), scratchMB int64) startOptions {
	o := startOptions{limits: job.Limits, scratchMB: scratchMB, read: job.Grants.FS.Read,
		at: job.Grants.FS.At, copies: job.Grants.FS.Copy, egress: len(job.Grants.Net) > 0,
		img: img, releaseImage: releaseImage, hostScratch: len(job.Collect) > 0}
	if sess != nil {
		o.uid, o.scratch = sess.uid, sess.dir
	}
	if t.lv.jobWithBase() && !o.egress && !airlock.HasPlacedCheck(ctx) {
		// Nothing to learn from the sandbox before the job can go: the
		// job spec follows the base spec, and the stage runs the job as
		// soon as its root is built, without waiting for the ready round
		// trip.
		spec := containerJobSpec(job, img, scratchMB, nil, attachOf(ctx) != nil)
		spec.Go = true
		o.job = &spec
	}
	return o
}

// collectFiles reads what a job's collect patterns name from the host's
// scratch directory; a failure to read it at all is one skipped line.
func collectFiles(scratch string, patterns []string) (map[string]string, []string) {
	if scratch == "" {
		return nil, []string{"collect: the sandbox has no host scratch directory"}
	}
	got, err := collect.Path(scratch, patterns, collect.MaxBytes)
	if err != nil {
		return nil, []string{err.Error()}
	}
	return got.Files, got.Skipped
}

var errWall = errors.New("wall clock")

// limitRefusal says why a cgroup refused new limits without the host's
// cgroup paths, which the full error names: the decision goes to the
// caller, the rest stays with the operator.
func limitRefusal(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return "the kernel refused the new limit: " + errno.Error()
	}
	return "the new limit was refused"
}

func stopMemory(job *airlock.Job) *airlock.Stop {
	return &airlock.Stop{Reason: airlock.StopMemory, Detail: fmt.Sprintf("memory limit of %d MiB reached", job.Limits.MemoryMB)}
}

func stopCPU(job *airlock.Job) *airlock.Stop {
	return &airlock.Stop{Reason: airlock.StopCPU, Detail: fmt.Sprintf("CPU time exceeded %v", job.Limits.CPU())}
}

func stopPids(job *airlock.Job) *airlock.Stop {
	return &airlock.Stop{Reason: airlock.StopPids, Detail: fmt.Sprintf("process limit of %d reached", job.Limits.Pids)}
}

// watch polls the cgroup while the job runs: the memory limit having
// killed a process, a fork refused by the process limit, or CPU time over
// its limit stops the whole job (a fork bomb is stopped, not left to
// thrash against the limit until the wall clock).
func (sb *sandbox) watch(job *airlock.Job) *airlock.Stop {
	oom, pidsMax := sb.cg.events()
	switch {
	case oom > 0:
		return stopMemory(job)
	case pidsMax > 0:
		return stopPids(job)
	}
	if _, cpu := sb.cg.usage(); job.Limits.CPUMS > 0 && cpu > job.Limits.CPUMS*1000 {
		return stopCPU(job)
	}
	return nil
}

type outcome struct {
	stdout, stderr []byte
	exit           int
	memPeak, cpuUS int64
	outBytes       int64
	runUS          int64
}

func rlimitsFor(job *airlock.Job, scratchMB int64) []stage.Rlimit {
	cpuS := uint64((job.Limits.CPUMS + 999) / 1000)
	// Above the cgroup's pids limit, so the cgroup refuses first (and the
	// stop is reported as "pids"); a backstop where the cgroup is absent.
	nproc := uint64(job.Limits.Pids + 2*pidsHeadroom)
	return []stage.Rlimit{
		{Resource: unix.RLIMIT_CORE, Cur: 0, Max: 0},
		{Resource: unix.RLIMIT_NOFILE, Cur: uint64(job.Limits.Files), Max: uint64(job.Limits.Files)},
		// A MiB above the scratch: on the scratch's tmpfs a write beyond
		// it fails with ENOSPC, as on every tier, before the limit's
		// SIGXFSZ; the limit still bounds a workspace's files.
		{Resource: unix.RLIMIT_FSIZE, Cur: uint64(scratchMB+1) << 20, Max: uint64(scratchMB+1) << 20},
		{Resource: unix.RLIMIT_CPU, Cur: cpuS, Max: cpuS + 1},
		{Resource: unix.RLIMIT_NPROC, Cur: nproc, Max: nproc},
		{Resource: unix.RLIMIT_MEMLOCK, Cur: 0, Max: 0},
	}
}

func envFor(job *airlock.Job) []string {
	vars := admit.Vars(job)
	env := make([]string, 0, len(vars))
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	return env
}

// containerJobSpec is the job spec a container's stage gets (a level-2
// stage gets more: see filterLevel.completeJob).
func containerJobSpec(job *airlock.Job, img *image.Image, scratchMB int64, netEnv []string, attached bool) stage.JobSpec {
	return stage.JobSpec{
		Argv:      job.Argv,
		Env:       imageEnv(img, append(envFor(job), netEnv...)),
		Egress:    netEnv != nil,
		NoExec:    !job.Grants.Spawn,
		Files:     job.Files,
		Stdin:     job.Stdin != "" || attached,
		ScratchMB: scratchMB,
		Rlimits:   rlimitsFor(job, scratchMB),
	}
}

// jobRun is one job's run in a started sandbox (see runJob).
type jobRun struct {
	ctx     context.Context
	sb      *sandbox
	job     *airlock.Job
	att     *attachio.Handle // the caller's pipes, when attached
	capt    *capture
	readers sync.WaitGroup // stdout and stderr
	// early: the placed check ran before the job went; the program starts
	// without the placed/go-ahead round trip.
	early bool
	// statusCh has the stage's statuses after the ready report.
	statusCh chan stage.Status
	// startFailed: the stage reported an error before it was ready.
	startFailed atomic.Bool
	// final is the stage's last status, once known; statusFirst: it came
	// before the stage's exit.
	final       *stage.Status
	statusFirst bool
	stop        *airlock.Stop
	runStart    time.Time // when the job went to the stage
}

// runJob hands the job to a started sandbox, feeds stdin, collects output
// up to the cap, enforces the wall clock and CPU time, and judges how the
// run ended.
//
// netEnv, when not nil, is the egress environment: the stage runs the
// forwarder and the program gets these variables.
func (sb *sandbox) runJob(ctx context.Context, job *airlock.Job, scratchMB int64, netEnv []string) (outcome, error) {
	var out outcome
	var spec stage.JobSpec // sent below, unless it went with the base spec
	if !sb.jobSent {
		spec = containerJobSpec(job, sb.img, scratchMB, netEnv, attachOf(ctx) != nil)
	}
	if err := sb.lv.completeJob(sb, job, &spec); err != nil {
		sb.kill()
		<-sb.waitCh
		return out, fmt.Errorf("starting sandbox: %w", err)
	}
	r := &jobRun{ctx: ctx, sb: sb, job: job, att: attachOf(ctx),
		capt: &capture{limit: job.Limits.OutputBytes, over: make(chan struct{}), sink: airlock.OutputSink(ctx)}}
	r.startStreams()
	if err := r.handJob(&spec); err != nil {
		return out, err
	}
	sb.lv.jobStarted(sb)
	r.await()
	out.runUS = monotime.Micros(r.runStart)
	if r.stop != nil && r.att != nil {
		r.att.Out.CloseWithError(r.stop) // a caller that stopped reading must not hold the drain
	}
	r.drain()
	return r.judge(out)
}

// startStreams starts reading the program's output and feeding its stdin.
func (r *jobRun) startStreams() {
	sb, capt := r.sb, r.capt
	r.readers.Add(2)
	if r.att != nil {
		// Attached: stdout to the caller's pipe, stderr kept and to the
		// caller's tail; stdin is the caller's from the start.
		go capt.tee(sb.stdout, airlock.Stdout, nil, r.att.Out, &r.readers)
		go capt.tee(sb.stderr, airlock.Stderr, &capt.err, r.att.Err, &r.readers)
		r.att.Started(sb.stdin)
		return
	}
	go capt.read(sb.stdout, airlock.Stdout, &capt.out, &r.readers)
	go capt.read(sb.stderr, airlock.Stderr, &capt.err, &r.readers)
	go func(stdin string) {
		if stdin != "" {
			_, _ = sb.stdin.WriteString(stdin)
		}
		sb.stdin.Close()
	}(r.job.Stdin)
}

// abort kills the sandbox and waits for it and its output, for a job
// that does not run.
func (r *jobRun) abort() {
	r.sb.kill()
	<-r.sb.waitCh
	r.readers.Wait()
}

// handJob sends the job (unless it went with the base spec), starts
// reading the stage's statuses, and has what was placed checked before
// the program may start.
func (r *jobRun) handJob(spec *stage.JobSpec) error {
	sb, ctx := r.sb, r.ctx
	// With no files for a fresh scratch, nothing will be placed: the check
	// (approvals recompute their digest over what is placed) runs on the
	// empty scratch now, and the stage starts the program without the
	// placed/go-ahead round trip. Without a check there is nothing to wait
	// for either.
	r.early = !airlock.HasPlacedCheck(ctx) || (len(r.job.Files) == 0 && sb.freshScratch())
	if r.early {
		if err := airlock.CheckPlaced(ctx, sb.placedDir()); err != nil {
			r.abort()
			return err
		}
		spec.Go = true
	}
	r.runStart = time.Now()
	if !sb.jobSent { // else sent with the base spec (see startOptions.job)
		if err := sendJob(sb.spec, *spec); err != nil {
			r.abort()
			return fmt.Errorf("starting sandbox: sending job: %w", err)
		}
	}
	r.readStatuses()
	if r.early {
		return nil
	}
	// The files are placed; what was placed is checked (approvals
	// recompute their digest over it) before the program may start.
	select {
	case st, ok := <-r.statusCh:
		if ok && st.Placed {
			if err := airlock.CheckPlaced(ctx, sb.placedDir()); err != nil {
				sb.kill()
				<-sb.waitCh
				_ = sb.cg.kill(0)
				r.readers.Wait()
				return err
			}
			_, _ = sb.spec.Write(stage.AppendGo(nil))
		} else if ok {
			r.final = &st
		}
	case <-sb.waitCh:
	case <-ctx.Done():
	}
	return nil
}

// readStatuses passes the stage's statuses to statusCh, but for the
// ready report start did not wait for.
func (r *jobRun) readStatuses() {
	r.statusCh = make(chan stage.Status, 2)
	go func() {
		defer close(r.statusCh)
		pending := r.sb.jobSent // the ready report start did not wait for
		for {
			st, err := stage.ReadStatus(r.sb.status)
			if err != nil {
				return
			}
			if pending && st.Ready && st.Error == "" {
				pending = false
				continue
			}
			if pending && st.Error != "" {
				r.startFailed.Store(true)
			}
			pending = false
			r.statusCh <- st
		}
	}()
}

// await waits for the program's end or a reason to stop it (output cap,
// wall clock, cancellation, a cgroup limit), which it then kills.
//
// The program's end is known from the stage's final status, sent once the
// program has exited (and, at level 2, what it left running has been
// killed and reaped): the result does not wait for the stage's own exit,
// which takes its namespaces down in the background.
func (r *jobRun) await() {
	sb, job := r.sb, r.job
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var exitedCh <-chan stage.Status
	if r.final == nil {
		exitedCh = r.statusCh
	}
	for {
		select {
		case <-sb.waitCh:
			return
		case st, ok := <-exitedCh:
			if !ok {
				exitedCh = nil // the stage is gone without a status: waitCh follows
				continue
			}
			if !st.Exited {
				r.final = &st // a failure or a missing program: the stage exits
				exitedCh = nil
				continue
			}
			r.final, r.statusFirst = &st, true
			return
		case <-r.capt.over:
			r.stop = &airlock.Stop{Reason: airlock.StopOutput, Detail: fmt.Sprintf("output exceeded %d bytes", job.Limits.OutputBytes)}
			sb.kill()
		case <-r.ctx.Done():
			if context.Cause(r.ctx) == errWall {
				r.stop = &airlock.Stop{Reason: airlock.StopTimeout, Detail: fmt.Sprintf("wall clock of %v ran out", job.Limits.Wall())}
			} else {
				r.stop = &airlock.Stop{Reason: airlock.StopKilled, Detail: "cancelled: " + context.Cause(r.ctx).Error()}
			}
			sb.kill()
		case <-tick.C:
			r.stop = sb.watch(job)
			if r.stop != nil {
				sb.kill()
			}
		}
		if r.stop != nil {
			<-sb.waitCh
			return
		}
	}
}

// drain waits for the program's output to end. The program's tree dies
// with it: the PID namespace's init is gone, or (level 2) the cgroup is
// emptied. After an early final status, a container's stage is exiting,
// which kills what the program left running; its output ends then.
func (r *jobRun) drain() {
	sb := r.sb
	stageGone := sb.waitCh
	if !r.statusFirst {
		_ = sb.cg.kill(0)
		stageGone = nil
	}
	drained := make(chan struct{})
	go func() { r.readers.Wait(); close(drained) }()
	if stageGone != nil {
		go func() {
			select {
			case <-stageGone:
				_ = sb.cg.kill(0) // a descriptor outlived the stage (a level-2 escapee)
			case <-drained:
			}
		}()
	}
	// Output a slow sink holds is waited for however long it takes (and
	// what is left in the pipes for one more period once it lets go);
	// otherwise the wait ends after five seconds.
	if frame.WaitHeld(drained, 5*time.Second, func() bool { return r.capt.held.Load() > 0 }) {
		return
	}
	// A descriptor escaped the cgroup (should not happen), or an attached
	// caller stopped reading: stop reading.
	if r.att != nil {
		r.att.Out.CloseWithError(errAttachEnded)
	}
	sb.stdout.Close()
	sb.stderr.Close()
	<-drained
}

// judge completes out with the output, usage and exit code, and says how
// the run ended.
func (r *jobRun) judge(out outcome) (outcome, error) {
	sb, job, capt := r.sb, r.job, r.capt
	if r.stop == nil && capt.overflowed() {
		r.stop = &airlock.Stop{Reason: airlock.StopOutput, Detail: fmt.Sprintf("output exceeded %d bytes", job.Limits.OutputBytes)}
	}
	var st stage.Status
	if r.final != nil {
		st = *r.final
	} else {
		st = <-r.statusCh
	}
	capt.mu.Lock()
	out.stdout, out.stderr, out.outBytes = capt.out, capt.err, capt.total
	capt.mu.Unlock()
	// Four small cgroup files, read two at a time.
	var oom, pidsMax int64
	evDone := make(chan struct{})
	go func() { oom, pidsMax = sb.cg.events(); close(evDone) }()
	out.memPeak, out.cpuUS = sb.cg.usage()
	<-evDone

	// How did the program end?
	code, signal := -1, 0
	if st.Exited {
		code, signal = st.Code, st.Signal
	} else if sb.wsOK && st.Error == "" {
		ws := sb.ws
		switch {
		case ws.Signaled():
			code, signal = 128+int(ws.Signal()), int(ws.Signal())
		default:
			code = ws.ExitStatus()
		}
	}
	out.exit = code
	cpuLimitUS := job.Limits.CPUMS * 1000
	switch {
	case r.stop != nil:
		return out, r.stop
	case oom > 0:
		return out, stopMemory(job)
	case signal == int(syscall.SIGXCPU) || (signal == int(syscall.SIGKILL) && cpuLimitUS > 0 && out.cpuUS >= cpuLimitUS):
		return out, stopCPU(job)
	case pidsMax > 0:
		return out, stopPids(job)
	case st.NotFound, st.NoExec:
		out.exit = 127
		if st.NoExec {
			out.exit = 126
		}
		msg := []byte("airlock: " + st.Error + "\n")
		out.stderr = append(out.stderr, msg...)
		if capt.sink != nil {
			capt.sink(airlock.Stderr, msg)
		}
		return out, nil
	case st.Field != "":
		return out, jobs.Invalid(st.Field, "%s", st.Error)
	case st.Error != "" && r.startFailed.Load():
		return out, fmt.Errorf("starting sandbox: %s", st.Error)
	case st.Error != "":
		return out, fmt.Errorf("running sandbox: %s", st.Error)
	case code < 0:
		return out, fmt.Errorf("running sandbox: stage ended without a status (%v)", sb.waitErr)
	}
	return out, nil
}

// sendJob writes a job spec to the stage.
func sendJob(w io.Writer, spec stage.JobSpec) error {
	b, err := stage.AppendJob(nil, &spec)
	if err == nil {
		_, err = w.Write(b)
	}
	return err
}
