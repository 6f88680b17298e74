package process

import (
	"context"
	"errors"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/tiers/internal/attachio"
)

var _ airlock.Attacher = (*Tier)(nil)

// errAttachEnded is what a read of an attached job's stdout returns when
// its output could not be drained.
var errAttachEnded = errors.New("process: attached job ended")

// stderrTail bounds the unread stderr an attachment keeps.
const stderrTail = 64 << 10

type attachKey struct{}

// attachOf returns the attachment run is running for, or nil.
func attachOf(ctx context.Context) *attachio.Handle {
	h, _ := ctx.Value(attachKey{}).(*attachio.Handle)
	return h
}

// Attach runs a command job attached (see airlock.Attacher), in a pooled
// sandbox when Run would claim one: the program's stdin is the caller's
// pipe from the start, its stdout goes to the caller's pipe, counted
// against the output limit, and everything else is as for Run. A pooled
// sandbox's stdin pipe is made when it starts and stays unused until its
// job, so an attached job takes it as a cold one does.
func (t *Tier) Attach(ctx context.Context, job airlock.Job) (airlock.Attached, error) {
	if err := attachio.Check(&job); err != nil {
		return nil, err
	}
	return attachio.Start(ctx, "process", stderrTail, func(ctx context.Context, h *attachio.Handle) (airlock.Result, error) {
		return t.run(context.WithValue(ctx, attachKey{}, h), job, nil)
	})
}
