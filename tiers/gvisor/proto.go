package gvisor

import (
	"fmt"

	"github.com/airlock-sandbox/airlock/internal/wirebytes"
)

// The agent protocol is package frame's, over the Unix socket between the
// host and the agent inside a pooled or session sandbox: the host sends a
// Job frame, the agent answers with Stdout and Stderr frames and one Exit.

// agentJob is what the host hands a claimed sandbox.
type agentJob struct {
	Argv   []string       `json:"argv"`
	Env    []string       `json:"env"`
	Files  wirebytes.Map  `json:"files,omitempty"` // any bytes: base64 when not UTF-8
	Stdin  wirebytes.Text `json:"stdin,omitempty"` // any bytes, as Files
	UID    int            `json:"uid"`
	NoFile uint64         `json:"nofile"`
	Output int64          `json:"output"`           // forward at most this many bytes (+1 to show overflow)
	Egress bool           `json:"egress,omitempty"` // run the egress forwarder for the job's life
	// Collect are the job's collect patterns, read from the scratch once
	// the program has ended.
	Collect []string `json:"collect,omitempty"`
	// Spawn is the job's spawn grant. Without it the job starts through
	// the exec guard (see package execguard), run as Guard's argv: how
	// the sandbox starts the agent's binary.
	Spawn bool     `json:"spawn,omitempty"`
	Guard []string `json:"guard,omitempty"`
	// Copies are the guest paths of the job's copy grants, which the
	// agent hands to the job's user before the program starts.
	Copies []string `json:"copies,omitempty"`
	// Attach: the program's stdin and stdout are the sandbox's stream
	// connections (see streamIn), so they cross the sandbox without
	// passing through the agent (see package airlock's Attacher).
	Attach bool `json:"attach,omitempty"`
}

// A single-job sandbox's agent opens two more connections to the host's
// socket right after its own, each starting with its tag: an attached
// job's stdin and stdout. The host takes exactly these three before it
// closes the socket, so the job can open none of its own.
const (
	streamIn  = 'i' // the program's stdin
	streamOut = 'o' // the program's stdout
)

// agentExit ends a job.
type agentExit struct {
	Code  int    `json:"code"`
	Error string `json:"error,omitempty"` // the agent could not start the job
	// CopyFull: a copy grant did not fit in the scratch cap (which one).
	CopyFull string `json:"copy_full,omitempty"`
	// FilesFull: the job's files did not fit in the scratch (why).
	FilesFull string `json:"files_full,omitempty"`
	// Times measured inside the sandbox, in microseconds: from the job
	// frame to the program started, and to its exit.
	SpawnUS int64 `json:"spawn_us"`
	ExitUS  int64 `json:"exit_us"`
}

// check refuses what no real exit says: the agent runs inside the
// sandbox, and its report is believed only within those bounds (its
// times, by splitRun; its messages by the frame's size).
func (e *agentExit) check() error {
	failed := e.Error != "" || e.CopyFull != "" || e.FilesFull != "" // the program never ran: code -1
	if (e.Code < 0 || e.Code > 255) && !(failed && e.Code == -1) {
		return fmt.Errorf("agent protocol: exit code %d is outside 0-255", e.Code)
	}
	return nil
}
