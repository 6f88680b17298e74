package corpus

import (
	"context"
	"fmt"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/value"
)

// session opens a session of tier and runs the case's Before jobs in it,
// each of which must succeed: they set the scene for the case's job.
func (c *Case) session(ctx context.Context, tier airlock.Tier, vars map[string]string) (airlock.Session, error) {
	st, ok := tier.(airlock.SessionTier)
	if !ok {
		return nil, fmt.Errorf("corpus: case %s runs in a session, and tier %s keeps none", c.ID, tier.Name())
	}
	s, err := st.OpenSession(ctx, airlock.SessionOptions{})
	if err != nil {
		return nil, fmt.Errorf("corpus: opening a session: %w", err)
	}
	for i, raw := range c.Before {
		job, err := c.buildJob(raw, vars)
		if err == nil {
			var res airlock.Result
			if res, err = s.Run(ctx, job); err == nil && res.ExitCode != 0 {
				err = fmt.Errorf("exit code %d: %s", res.ExitCode, value.Clip(res.Stderr, 300))
			}
		}
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("corpus: before[%d]: %w", i, err)
		}
	}
	return s, nil
}

// inSession is a tier whose runs go to one of its sessions.
type inSession struct {
	airlock.Tier
	s airlock.Session
}

func (t inSession) Run(ctx context.Context, job airlock.Job) (airlock.Result, error) {
	return t.s.Run(ctx, job)
}
