package airlock

import "context"

// Stream names one of a program's output streams.
type Stream uint8

// The output streams.
const (
	Stdout Stream = 1
	Stderr Stream = 2
)

func (s Stream) String() string {
	switch s {
	case Stdout:
		return "stdout"
	case Stderr:
		return "stderr"
	}
	return "unknown"
}

type outputKey struct{}

// WithOutput returns a context that asks the tier running a job to pass
// its output to sink while the job runs, chunk by chunk as the program
// writes it. The Result still carries the whole output; the chunks are
// exactly what it will hold, in each stream's order, so together they never
// exceed the job's output cap. Tiers call sink one chunk at a time (never
// concurrently) from the goroutine that reads the output, and p is only
// valid during the call: a sink that keeps it copies it, and a slow sink
// holds up the program's output, never its limits. Tiers that produce no
// output (expr) never call it.
func WithOutput(ctx context.Context, sink func(stream Stream, p []byte)) context.Context {
	return context.WithValue(ctx, outputKey{}, sink)
}

// OutputSink returns the sink [WithOutput] put in ctx, or nil. A tier calls
// it with each chunk of output as it keeps it under the cap, before the
// run's Result is returned.
func OutputSink(ctx context.Context) func(stream Stream, p []byte) {
	sink, _ := ctx.Value(outputKey{}).(func(Stream, []byte))
	return sink
}
