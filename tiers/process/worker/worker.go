// Package worker is the inside of a guarded worker: a language tier run
// one job per process, this binary re-executed by the process package
// into user, PID, mount, network, IPC and UTS namespaces, pivoted into an
// empty read-only root, under the seccomp filter (on every thread) and
// address-space and CPU rlimits.
//
// The process package's worker role runs it (see package role), with the
// tiers registered in the binary; the entry packages, such as
// [exprworker], hold an interpreter's constructor and warm-up job.
package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/tiers/process/internal/stage"
	"github.com/airlock-sandbox/airlock/tiers/process/internal/sysfilter"
	"github.com/airlock-sandbox/airlock/tiers/process/internal/workerwire"
	"golang.org/x/sys/unix"
)

// Env names the worker a re-executed binary should run (with the stage
// variable set to the worker stage).
const Env = "_AIRLOCK_PROCESS_WORKER"

// An Entry is a language tier a worker can run: its constructor and a
// trivial job in wire form that the worker runs once before it reports
// ready (see warmUp; empty for none).
type Entry struct {
	New     func() airlock.Tier
	WarmJob string
}

// RoleName is the worker stage's role (see package role); Env names the
// worker.
const RoleName = stage.Worker

// Main is the worker stage's role (see package role): it runs the worker
// Env names, found by lookup, and never returns but by exiting.
func Main(lookup func(name string) (Entry, bool)) int {
	name := os.Getenv(Env)
	e, ok := lookup(name)
	if !ok {
		fmt.Fprintf(os.Stderr, "airlock worker: no worker %q registered in this binary\n", name)
		return 2
	}
	// The worker runs on a goroutine of its own, which no thread is
	// locked to (the role runs on the startup thread, locked to it).
	// What confines a worker applies to the whole process: its
	// namespaces (made at clone), the pivoted root (pivot_root moves
	// every thread's), the seccomp filter (loaded on every thread) and
	// the rlimits. A locked goroutine that resumes after more than 10 ms
	// in a system call, as a worker does when its job arrives after it
	// has waited in the pool, is preempted by the runtime's monitor, and
	// a locked one can only be rescheduled by handing its P to another
	// thread and back, ≈ 0.1 ms here on the claim's path; an unlocked one
	// goes back to its thread at once.
	go func() { os.Exit(run(e.New, e.WarmJob)) }()
	select {}
}

// warmUp runs a trivial job through the same steps as the real one
// (the request's framing, strict decoding, the tier, encoding the Result)
// before the worker reports ready, so the first touch of that code — page
// faults into this large binary, encoding/json's per-type tables, lazily
// built interpreter tables — is paid while the worker waits in the pool
// rather than after the claim. It carries no job data, and the worker
// still serves exactly one job.
func warmUp(tier airlock.Tier, warmJob string) {
	if warmJob == "" {
		return
	}
	job, err := airlock.DecodeJob([]byte(warmJob))
	if err != nil {
		return
	}
	frame, err := workerwire.AppendRequest(nil, 1, 1, &job)
	if err != nil {
		return
	}
	req, err := workerwire.ReadRequest(bytes.NewReader(frame))
	if err != nil {
		return
	}
	res, _ := tier.Run(context.Background(), req.Job)
	_ = writeResult(io.Discard, res)
}

// writeResult sends the Result (the parent replaces its tier, level,
// clock and seed). A result that cannot be encoded is replaced by an
// internal error saying why.
func writeResult(w io.Writer, res airlock.Result) error {
	frame, err := workerwire.AppendResult(nil, &res)
	if err != nil {
		res = airlock.Result{Error: &airlock.ErrorInfo{Kind: airlock.ErrInternal, Message: "encoding the result: " + err.Error()}}
		if frame, err = workerwire.AppendResult(nil, &res); err != nil {
			return err
		}
	}
	_, err = w.Write(frame)
	return err
}

// exitPauseNS is how long a worker sleeps between writing its result and
// exiting (see run).
const exitPauseNS = 200_000

// guardOverheadMB is added to the job's memory limit for the address-space
// rlimit: room for the Go runtime's own growth (thread stacks, heap
// metadata) beyond what it had reserved at start.
const guardOverheadMB = 256

// vmSize returns this process's current address-space size in bytes.
func vmSize() uint64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 2 << 30
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmSize:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 2 << 30
}

// run is the worker's side: build the empty root, confine every
// thread, warm up, announce readiness, run one job, write its result, exit.
func run(newTier func() airlock.Tier, warmJob string) int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "airlock worker:", err)
		return 2
	}
	baseVM := vmSize()
	// The root is replaced below: never in the host's namespaces.
	if err := inOwnUserNamespace(); err != nil {
		return fail(err)
	}
	if err := stage.EmptyRoot(); err != nil {
		return fail(err)
	}
	tier := newTier()
	// The limits that do not depend on the job are set now; the job's
	// address space and CPU time are bound when it arrives.
	if err := stage.SetRlimits([]stage.Rlimit{
		{Resource: unix.RLIMIT_CORE},
		{Resource: unix.RLIMIT_NOFILE, Cur: 64, Max: 64},
	}); err != nil {
		return fail(err)
	}
	if err := loadFilter(); err != nil {
		return fail(err)
	}
	warmUp(tier, warmJob)
	if err := workerwire.WriteReady(os.Stdout); err != nil {
		return fail(err)
	}
	req, err := workerwire.ReadRequest(os.Stdin)
	if err != nil {
		return fail(err)
	}
	job := req.Job
	// The address space is capped at what the runtime had reserved at
	// start plus the job's memory and headroom; the cgroup holds the
	// memory actually used.
	mem := baseVM + uint64(req.MemoryMB+guardOverheadMB)<<20
	if err := stage.SetRlimits([]stage.Rlimit{
		{Resource: unix.RLIMIT_AS, Cur: mem, Max: mem},
		{Resource: unix.RLIMIT_CPU, Cur: req.CPUSeconds, Max: req.CPUSeconds + 1},
	}); err != nil {
		return fail(err)
	}
	res, _ := tier.Run(context.Background(), job)
	if err := writeResult(os.Stdout, res); err != nil {
		return fail(err)
	}
	// The CPU goes to the host before this process exits: the write woke
	// the host's reader, often onto this CPU, and exiting first (tearing
	// down this address space) would keep it waiting. Measured: a warm
	// job's median 98–108 µs with this pause, 107–132 µs without, five
	// alternating runs. Nothing waits for the exit on the caller's path.
	_ = unix.Nanosleep(&unix.Timespec{Nsec: exitPauseNS}, nil)
	return 0
}

// inOwnUserNamespace refuses to go on in the host's user namespace (whose
// uid map is the identity over the whole range): a worker started by
// anything but the process package must not pivot the host's root.
func inOwnUserNamespace() error {
	data, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return fmt.Errorf("reading uid map: %w", err)
	}
	if f := strings.Fields(string(data)); len(f) == 3 && f[0] == "0" && f[1] == "0" && f[2] == "4294967295" {
		return errors.New("not in a sandbox's user namespace: refusing to run a worker here")
	}
	return nil
}

// loadFilter confines every thread of the worker with the level-2 policy.
func loadFilter() error {
	prog, err := sysfilter.Program(sysfilter.FilterOptions{})
	if err != nil {
		return err
	}
	return stage.LoadProgram(prog, true)
}
