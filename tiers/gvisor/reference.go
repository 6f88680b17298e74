package gvisor

import (
	"context"
	"errors"
	"fmt"

	"github.com/airlock-sandbox/airlock"
)

// Reference makes ready the sandbox a cold run of job would start on this
// tier, as Run would (its directory, files, bundle, and cgroup with the
// job's limits), and returns the runsc command line that runs it to
// completion without the tier around it, and a function that removes what
// was made. `airlock bench` times that command as the reference for a
// whole `airlock run --tier gvisor`: the same sandbox, started bare.
//
// Only a job whose program is the sandbox's first process has one: a job
// the tier starts through its agent (a net grant, collected files, a
// scratch cap, a copy grant) is refused.
func (t *Tier) Reference(ctx context.Context, job airlock.Job) (argv []string, remove func(), err error) {
	if t.avail != nil {
		return nil, nil, t.avail
	}
	job, err = t.cfg.limits.Prepare(job)
	if err != nil {
		return nil, nil, err
	}
	if err := t.admit(job, false); err != nil {
		return nil, nil, err
	}
	if needsAgent(&job) {
		return nil, nil, errors.New("gvisor: no bare reference for a job the tier starts through its agent")
	}
	img, release, err := t.acquire(ctx, job.Image)
	if err != nil {
		return nil, nil, err
	}
	id := t.newID()
	dir, err := t.sandboxDir(id)
	if err != nil {
		release()
		return nil, nil, err
	}
	remove = func() {
		// runsc deletes a container whose `runsc run` ended by itself; a
		// run that never started or was killed leaves one behind.
		if err := t.destroy(id, dir, true); err != nil {
			logf("%v", err)
		}
		release()
	}
	args, err := t.prepareDirect(ctx, &job, img, id, dir)
	if err != nil {
		remove()
		return nil, nil, fmt.Errorf("preparing reference sandbox: %w", err)
	}
	return append([]string{t.runsc}, args...), remove, nil
}
