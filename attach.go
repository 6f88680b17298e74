package airlock

import (
	"context"
	"io"
)

// Attacher is implemented by tiers that can run a command job attached: the
// program is long-running (an MCP server, a language server) and its stdin
// and stdout are a live pipe to the caller rather than a string in and a
// string out. The job's grants and limits apply as they do to Run: the
// wall clock bounds the attachment's life, the output limit counts every
// byte the program writes, and the standard streams and the egress gateway
// are the only channels out of the sandbox.
//
// Attach returns once the program has started, or a typed error as Run
// would (a [*NotAdmitted], an [*InvalidJob], ...). A job that sets Stdin or
// Collect is invalid: an attached program's input is the pipe, and it has
// no end at which to collect files. ctx bounds the attachment: when it
// ends the program is killed.
type Attacher interface {
	Attach(ctx context.Context, job Job) (Attached, error)
}

// Attached is a running attached job.
//
// Stdout must be read for the program to make progress (its output is not
// buffered without bound); Stderr keeps at most the last bytes the caller
// did not read, and need not be read at all. Wait returns the job's Result
// once the program has ended and its sandbox is being destroyed: the exit
// code, the stderr the job kept, usage and the egress decisions; Stdout is
// empty (it went to the pipe). Kill ends the program at once; Wait then
// reports a [*Stop] with [StopKilled]. Kill and Wait are safe to call more
// than once and from any goroutine.
type Attached interface {
	Stdin() io.WriteCloser
	Stdout() io.Reader
	Stderr() io.Reader
	Wait() (Result, error)
	Kill()
}
