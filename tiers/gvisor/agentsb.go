package gvisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/airlock-sandbox/airlock/tiers/internal/admit"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/internal/collect"
	"github.com/airlock-sandbox/airlock/internal/egresswire"
	"github.com/airlock-sandbox/airlock/internal/jobs"
	"github.com/airlock-sandbox/airlock/internal/value"
	"github.com/airlock-sandbox/airlock/internal/wirebytes"
	"github.com/airlock-sandbox/airlock/role"
	"github.com/airlock-sandbox/airlock/tiers/internal/attachio"
	"github.com/airlock-sandbox/airlock/tiers/internal/frame"
)

// sandbox is a running sandbox whose PID 1 is the agent, connected and
// waiting for a job.
type sandbox struct {
	id   string
	dir  string
	cg   cgroup
	conn *net.UnixConn
	// in and out are a single-job sandbox's streams: an attached job's
	// stdin and stdout (see streamIn); nil in a session's.
	in, out *net.UnixConn
	gone    bool   // being destroyed (set by destroyLater)
	claimed bool   // taken from the warm pool
	lim     limits // what the cgroup holds now
	key     poolKey
	launch  []string     // how the sandbox starts the agent's binary
	img     *image.Image // its root (nil: the host view without a resolver)
	release func()       // ends the sandbox's hold on img, once it is destroyed
}

// agentStartTimeout bounds how long a new sandbox's agent may take to
// connect back.
const agentStartTimeout = 60 * time.Second

// newAgentSandbox creates a sandbox running the agent in the given mode,
// under the policy's default limits (a claim replaces them), with the given
// read grants (none for pooled sandboxes and sessions), whose root is img.
// The sandbox takes over the hold on img (release), which ends when it is
// destroyed, or here if it cannot be created.
func (t *Tier) newAgentSandbox(mode string, fs airlock.FSGrant, img *image.Image, release func()) (_ *sandbox, err error) {
	id := t.newID()
	dir, err := t.sandboxDir(id)
	if err != nil {
		release()
		return nil, err
	}
	sb := &sandbox{id: id, dir: dir, cg: cgroup{path: "/" + id}, key: poolKey{digest(img)}, img: img, release: release}
	live := false
	defer func() {
		if err != nil {
			sb.hangUp()
			if derr := t.destroy(id, dir, live); derr != nil {
				logf("%v", derr)
			}
			release()
		}
	}()
	sockDir := filepath.Join(dir, "sock")
	if err := os.Mkdir(sockDir, 0o755); err != nil {
		return nil, err
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(sockDir, filepath.Base(agentSock)), Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("agent socket: %w", err)
	}
	defer ln.Close() // unlinked: the job can open no channel of its own
	_ = os.Chmod(filepath.Join(sockDir, filepath.Base(agentSock)), 0o777)

	def := t.cfg.limits.Default
	b := t.newBundle(id, &airlock.Job{Limits: def}, img)
	b.grants = fs
	b.scratchMB = fs.ScratchMB
	b.args = []string{agentBin, agentArg, mode}
	if b.image {
		launch, err := t.agentLaunch()
		if err != nil {
			return nil, fmt.Errorf("starting sandbox: %w", err)
		}
		b.args = append(append([]string(nil), launch...), agentArg, mode)
		if len(launch) > 1 {
			b.agentLib = t.agentLibHost()
		}
	}
	sb.launch = b.args[:len(b.args)-2]
	if guard := t.guard(); guard != "" {
		// A static binary: it runs in any image as it is.
		b.guard = guard
		sb.launch = []string{guardBin}
	}
	b.env = []string{role.Env + "=" + agentRole, "PATH=" + defaultPATH}
	b.cwd = "/"
	b.uid = 0
	b.agent = t.agent
	b.sockDir = sockDir
	if err := b.write(dir); err != nil {
		return nil, err
	}
	if err := sb.cg.create(); err != nil {
		return nil, err
	}
	sb.lim = cgroupLimits(def, t.cfg.cpus)
	if err := sb.cg.set(sb.lim); err != nil {
		return nil, err
	}
	// run --detach must not be handed pipes: the sandbox inherits them and a
	// reader would wait for ever. Its diagnostics go to a file.
	logFile, err := os.Create(filepath.Join(dir, "runsc.log"))
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	ctx, cancel := context.WithTimeout(context.Background(), agentStartTimeout)
	defer cancel()
	args := append(t.runscFlags(true, fs.ScratchMB), "run", "--detach", "--bundle", dir, id)
	cmd := exec.CommandContext(ctx, t.runsc, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	live = true
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("starting sandbox: %w: %s", err, tail(filepath.Join(dir, "runsc.log")))
	}
	_ = ln.SetDeadline(time.Now().Add(agentStartTimeout))
	if sb.conn, err = ln.AcceptUnix(); err != nil {
		return nil, fmt.Errorf("waiting for the agent: %w", err)
	}
	if mode == modeOnce {
		if sb.in, sb.out, err = acceptStreams(ln); err != nil {
			return nil, fmt.Errorf("waiting for the agent's streams: %w", err)
		}
	}
	return sb, nil
}

// hangUp closes the agent's connection and the sandbox's streams.
func (sb *sandbox) hangUp() {
	for _, c := range []*net.UnixConn{sb.conn, sb.in, sb.out} {
		if c != nil {
			c.Close()
		}
	}
}

func tail(path string) string {
	data, _ := os.ReadFile(path)
	s := strings.TrimSpace(string(data))
	if len(s) > 500 {
		s = "…" + s[len(s)-500:]
	}
	return s
}

// destroyLater destroys a sandbox in the background; Close waits for it.
func (t *Tier) destroyLater(sb *sandbox) {
	sb.gone = true
	sb.hangUp()
	t.bg.Add(1)
	go func() {
		defer t.bg.Done()
		if err := t.destroy(sb.id, sb.dir, true); err != nil {
			logf("%v", err)
		}
		sb.release()
	}()
	switch {
	case t.pool == nil:
	case sb.claimed:
		t.pool.Done(sb.key) // a claimed sandbox's replacement starts now
	default:
		t.pool.Poke()
	}
}

// stopGrace bounds how long a session's agent may take to kill a stopped
// run's processes and report the run's end before the sandbox is
// destroyed instead (and the session ends).
const stopGrace = 5 * time.Second

// errSandboxGone means an agent sandbox was gone before a job reached it
// (a session's, which died between runs).
var errSandboxGone = errors.New("the sandbox is gone")

// errSandboxLost means an agent sandbox died or hung up mid-job.
var errSandboxLost = errors.New("sandbox lost")

// runAgent hands a job to an agent sandbox and collects the result. The
// job's limits are written into the sandbox's cgroup first, and its
// secrets travel only in the job frame: nothing of the job existed in the
// sandbox before the claim. An ephemeral sandbox is destroyed afterwards;
// a session's survives unless the run was stopped or the agent was lost.
func (t *Tier) runAgent(ctx context.Context, sb *sandbox, job *airlock.Job, r *run, ephemeral bool) (airlock.Result, error) {
	return t.runAgentWith(ctx, sb, job, r, ephemeral, nil)
}

// runAgentWith is runAgent, attached to att when it is not nil (see
// attach.go): the job's stdin comes from att's writer once the job frame
// has gone, and its stdout goes to att's pipe instead of the result.
func (t *Tier) runAgentWith(ctx context.Context, sb *sandbox, job *airlock.Job, r *run, ephemeral bool, att *attachio.Handle) (airlock.Result, error) {
	keep := false
	defer func() {
		if !keep {
			t.destroyLater(sb)
		}
	}()
	files, err := t.stage(ctx, sb.id, job.Files)
	if err != nil {
		keep = !ephemeral // nothing reached the sandbox: a session goes on
		return r.finish(err)
	}
	// The job's limits replace the sandbox's (the writes are skipped when
	// they are the same, as for a job under the default limits).
	if l := cgroupLimits(job.Limits, t.cfg.cpus); l != sb.lim {
		if err := sb.cg.set(l); err != nil {
			if ephemeral && len(job.Grants.Net) == 0 && att == nil {
				// The sandbox already uses more memory than the job may: run
				// it cold instead, under exactly its own limits, in its image.
				img, release, err := t.acquire(ctx, job.Image)
				if err != nil {
					return r.finish(err)
				}
				r.res.Image = digest(img)
				return t.runCold(ctx, job, r, img, release)
			}
			if !ephemeral && errors.Is(err, syscall.EBUSY) {
				// Nothing was changed, nothing reached the sandbox: a
				// session goes on.
				keep = true
				return r.finish(&airlock.NotAdmitted{Tier: Name, Reason: fmt.Sprintf("limits.memory_mb %d is below the memory the session's sandbox already holds (what runs left in /scratch, and memory the sandbox has not given back): give the run more memory", job.Limits.MemoryMB)})
			}
			return r.finish(fmt.Errorf("binding limits: %w", err))
		}
		sb.lim = l
	}
	baseOOM, basePids, baseCPU := sb.cg.ooms(), sb.cg.pidsHits(), sb.cg.cpuTime()
	aj := agentJob{
		Argv:    job.Argv,
		Env:     envFor(sb.img, admit.Vars(job)),
		Files:   files,
		Collect: job.Collect,
		Stdin:   wirebytes.Text(job.Stdin),
		UID:     sandboxUID,
		NoFile:  uint64(job.Limits.Files),
		Output:  job.Limits.OutputBytes,
		Spawn:   job.Grants.Spawn,
		Guard:   sb.launch,
		Copies:  copyGuests(job.Grants.FS),
	}
	var st *streams
	if att != nil {
		if sb.in == nil {
			return r.finish(errors.New("handing over the job: the sandbox has no streams to attach"))
		}
		st = newStreams(sb.in, sb.out)
		defer st.close()
		aj.Attach = true
	}
	var gw *egresswire.Gateway
	if len(job.Grants.Net) > 0 {
		jg, env, err := t.startGateway(ctx, sb, job)
		if err != nil {
			return r.finish(err)
		}
		defer jg.Close() // on every path, before the sandbox is destroyed
		gw = jg
		aj.Env = append(aj.Env, env...)
		aj.Egress = true
	}
	payload, err := json.Marshal(aj)
	if err != nil {
		return r.finish(fmt.Errorf("handing over the job: %w", err))
	}
	if len(payload) > frame.MaxJob {
		if ephemeral && att == nil && !needsAgent(job) {
			// A pooled claim: a cold start places the files on the host,
			// as without a pool.
			img, release, err := t.acquire(ctx, job.Image)
			if err != nil {
				return r.finish(err)
			}
			r.res.Image = digest(img)
			return t.runCold(ctx, job, r, img, release)
		}
		keep = !ephemeral // nothing reached the sandbox: a session goes on
		return r.finish(jobs.Invalid("files", "the job's files and stdin take %d bytes encoded, above the %d the sandbox's agent takes in one job frame", len(payload), frame.MaxJob))
	}
	r.ready()
	if err := frame.Write(sb.conn, frame.Job, payload); err != nil {
		return r.finish(fmt.Errorf("handing over the job: %w: %v", errSandboxGone, err))
	}
	out := newOutput(ctx, job.Limits.OutputBytes)
	destroy := func() {
		if _, err := t.runscOut(context.Background(), "delete", "--force", sb.id); err != nil && !notExist(err) {
			logf("killing sandbox %s: %v", sb.id, err)
		}
		sb.conn.Close()
		if att != nil {
			st.close()
			att.Out.CloseWithError(errAttachEnded) // a caller that stopped reading must not hold the loop
		}
	}
	// A stopped run: a single-job sandbox is destroyed with it. A
	// session's is kept: the agent is told (a Kill frame) to kill the
	// run's processes, and answers with the run's exit as usual; an agent
	// that cannot be told, or does not answer within stopGrace, loses the
	// sandbox (abandoned) and the session with it.
	var (
		settleMu  sync.Mutex
		settled   bool // readAgent has returned
		abandoned bool
	)
	abandon := func() {
		settleMu.Lock()
		if settled {
			settleMu.Unlock()
			return
		}
		abandoned = true
		settleMu.Unlock()
		destroy()
	}
	w := newWatcher(func() {
		if ephemeral {
			destroy()
			return
		}
		_ = sb.conn.SetWriteDeadline(time.Now().Add(time.Second))
		err := frame.Write(sb.conn, frame.Kill, nil)
		_ = sb.conn.SetWriteDeadline(time.Time{})
		if err != nil {
			abandon()
			return
		}
		time.AfterFunc(stopGrace, abandon)
	})
	if att != nil {
		att.Started(st.stdin())
		go st.copyOut(func(p []byte) {
			out.write(nil, p) // counted against the limit, kept by the caller
			_, _ = att.Out.Write(p)
		})
	}
	w.start(ctx, sb.cg, baseCPU, job.Limits, out)
	exit, lost := readAgent(sb.conn, job, out, att, &r.res)
	settleMu.Lock()
	settled = true
	kept := !ephemeral && !abandoned && lost == nil
	settleMu.Unlock()
	if att != nil {
		// The program's stdout ends once it and what it left are gone,
		// which the agent sees to before its exit report; past a lost
		// agent, what is in flight is dropped.
		st.drain(exit != nil)
	}
	stop := w.done()
	if gw != nil {
		r.res.Decision = append(r.res.Decision, gw.Close()...)
	}
	r.res.Stdout, r.res.Stderr = out.strings()
	r.res.Usage = usage(sb.cg, out)
	r.res.Usage.CPUUS -= baseCPU.Microseconds()
	if stop == nil && sb.cg.ooms() > baseOOM {
		stop = &airlock.Stop{Reason: airlock.StopMemory, Detail: fmt.Sprintf("memory limit of %d MiB reached", job.Limits.MemoryMB)}
	}
	if stop == nil && sb.cg.pidsHits() > basePids {
		// A fork the process limit refused stops the job, as on every
		// tier, whether the program survived it or the sandbox went down.
		stop = stopPids(job)
	}
	switch {
	case stop != nil:
		// The agent killed the run's processes and reported its end:
		// a session goes on.
		keep = kept
		return r.finish(stop)
	case lost != nil:
		return r.finish(fmt.Errorf("running sandbox: %w: %v", errSandboxLost, lost))
	case exit.CopyFull != "":
		return r.finish(jobs.Invalid("grants.fs.copy", "%s (grants.fs.scratch_mb, %d MB)", exit.CopyFull, job.Grants.FS.ScratchMB))
	case exit.FilesFull != "":
		return r.finish(jobs.Invalid("files", "the files do not fit in the scratch (grants.fs.scratch_mb, %d MB): %s", job.Grants.FS.ScratchMB, exit.FilesFull))
	case exit.Error != "":
		return r.finish(fmt.Errorf("running sandbox: agent: %s", exit.Error))
	}
	r.res.ExitCode = exit.Code
	keep = !ephemeral
	res, err := r.finish(nil)
	splitRun(&res.Timings, exit)
	return res, err
}

// readAgent reads the agent's frames for one job until its Exit frame
// (exit) or a broken protocol or connection (lost): output into out (or,
// attached, stderr to att too), collected files into res. The agent is
// no more trusted than the sandbox: a frame the job does not call for,
// or a second Files frame (each up to 48 MiB of JSON to decode, which a
// hostile agent could send until the wall clock), is a protocol error,
// found from its header before any of its payload is read.
func readAgent(conn net.Conn, job *airlock.Job, out *output, att *attachio.Handle, res *airlock.Result) (exit *agentExit, lost error) {
	collected := false
	// Only the frames the job calls for are read at all: any other (a Job
	// frame, a Files frame the job gets none or no more of: each may
	// announce up to 48 MiB) is refused from its header.
	allow := func(t frame.Type) bool {
		switch t {
		case frame.Stdout:
			return att == nil
		case frame.Stderr, frame.Exit:
			return true
		case frame.Files:
			return len(job.Collect) > 0 && !collected
		}
		return false
	}
	for exit == nil && lost == nil {
		typ, payload, err := frame.ReadAllowed(conn, allow)
		switch {
		case errors.Is(err, frame.ErrUnexpected):
			lost = fmt.Errorf("agent protocol: %w", err)
		case err != nil:
			lost = err
		case typ == frame.Stdout && att == nil:
			out.write(&out.stdout, payload)
		case typ == frame.Stderr:
			out.write(&out.stderr, payload)
			if att != nil {
				att.Err.Write(payload)
			}
		case typ == frame.Files && len(job.Collect) > 0 && !collected:
			collected = true
			var w collect.Wire
			if err := json.Unmarshal(payload, &w); err != nil {
				lost = fmt.Errorf("agent protocol: files: %w", err)
				break
			}
			got := collect.Accept(w, job.Collect)
			res.Files, res.FilesSkipped = got.Files, got.Skipped
		case typ == frame.Exit:
			exit = new(agentExit)
			if err := json.Unmarshal(payload, exit); err != nil {
				exit, lost = nil, err
			} else if err := exit.check(); err != nil {
				exit, lost = nil, err
			} else {
				// Its messages end up in the host's error: one
				// bounded line each, whatever the agent wrote.
				exit.Error, exit.CopyFull = value.Line(exit.Error, maxAgentText), value.Line(exit.CopyFull, maxAgentText)
				exit.FilesFull = value.Line(exit.FilesFull, maxAgentText)
			}
		default:
			lost = fmt.Errorf("agent protocol: unexpected frame %c", typ)
		}
	}
	return exit, lost
}

// maxAgentText bounds each message of an agent's exit report the host
// quotes.
const maxAgentText = 512

// splitRun splits the host's run time (from handing the job over to the
// exit report) by the agent's own clock: start covers claim, handover and
// spawn; run the program alone. The agent's times are believed only
// within the host's: a sandbox may report any numbers, and these must not
// make start and run exceed the total, nor overflow it.
func splitRun(t *airlock.Timings, exit *agentExit) {
	if exit.SpawnUS > 0 && exit.ExitUS >= exit.SpawnUS && exit.ExitUS <= t.RunUS {
		t.StartUS += exit.SpawnUS
		t.RunUS = exit.ExitUS - exit.SpawnUS
	}
}
