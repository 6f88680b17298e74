package runstop

import (
	"context"
	"errors"
	"testing"
)

func TestStopEndsTheRunAndLaterOnes(t *testing.T) {
	var r Run
	ctx, end := r.Begin(context.Background())
	if ctx.Err() != nil {
		t.Fatal("a run began stopped")
	}
	r.Stop()
	if !errors.Is(context.Cause(ctx), ErrClosed) {
		t.Fatalf("the run in progress: cause %v, want ErrClosed", context.Cause(ctx))
	}
	end()
	later, end2 := r.Begin(context.Background())
	defer end2()
	if !errors.Is(context.Cause(later), ErrClosed) {
		t.Fatalf("a run begun after Stop: cause %v, want ErrClosed", context.Cause(later))
	}
}

func TestEndedRunIsNotStoppedLater(t *testing.T) {
	var r Run
	ctx, end := r.Begin(context.Background())
	end()
	r.Stop()
	if errors.Is(context.Cause(ctx), ErrClosed) {
		t.Fatal("Stop reached a run that had ended")
	}
}
