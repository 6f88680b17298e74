package process

import (
	"context"
	"os"
	"os/exec"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/tiers/process/internal/stage"
)

// isolation is what differs between the tier's two levels: the syscall
// filter (level 2, level_filter.go) and the container (level 3,
// level_container.go). A tier picks one when it is built, and each of its
// sandboxes carries it; nothing else asks which level it is at.
type isolation interface {
	// What the level can do, for admission and configuration.
	ownFS() bool  // a mount namespace of its own: placed grants, images
	ownNet() bool // a network namespace of its own: net grants
	warm() bool   // sandboxes may be started ahead of their job (a pool)
	cost() time.Duration
	// jobWithBase: a cold start may send the job spec right behind the
	// base spec when nothing must be learnt from the sandbox first.
	jobWithBase() bool

	// Starting a stage (see Tier.start), in this order.

	// beforeStart is called first, with the stage binary.
	beforeStart(t *Tier, bin *stageBinary)
	// cgroupFirst reports whether a start has its job's cgroup before
	// its stage starts.
	cgroupFirst(o *startOptions) bool
	// build sets up sb's scratch and fills the stage's descriptors from
	// stage.FdScratch on, and the base spec that describes them.
	build(t *Tier, sb *sandbox, o *startOptions, bin *stageBinary, fds *fdTable, base *stage.BaseSpec) error
	// command sets the stage's environment and process attributes.
	command(sb *sandbox, cmd *exec.Cmd)
	// launch starts the stage; cgDir, if not nil, is the cgroup it is
	// born in.
	launch(t *Tier, sb *sandbox, bin *stageBinary, cmd *exec.Cmd, base *stage.BaseSpec, cgDir *os.File) error
	// handOver finishes a started stage: enter puts it into its cgroup;
	// a container also gets its base spec (and job) and builds its root.
	handOver(ctx context.Context, sb *sandbox, o *startOptions, base *stage.BaseSpec, enter func() error) error

	// Running a job (see sandbox.runJob).

	// completeJob adds what the level's stage needs to the job spec.
	completeJob(sb *sandbox, job *airlock.Job, spec *stage.JobSpec) error
	// jobStarted is called once the program may start.
	jobStarted(sb *sandbox)
	// stopProgram, in kill, stops the program before its stage is
	// killed.
	stopProgram(sb *sandbox)
	// placedDir is where the parent sees the job's placed files.
	placedDir(sb *sandbox) string
	// freshScratch reports whether sb's scratch is its own, new and empty.
	freshScratch(sb *sandbox) bool
}

// levelFor returns the isolation of a tier at level l.
func levelFor(l airlock.Level) isolation {
	if l == airlock.LevelContainer {
		return containerLevel{}
	}
	return filterLevel{}
}
