package gvisor

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"

	"github.com/airlock-sandbox/airlock"
)

// The agent protocol: frames of one type byte, a big-endian uint32 payload
// length and the payload, over the Unix socket between the host and the
// agent inside a pooled or session sandbox. Every frame type has its own
// size bound, checked before anything is allocated.
const (
	frameJob    = 'J' // host → agent: an agentJob (JSON)
	frameStdout = 'O' // agent → host: a chunk of the job's stdout
	frameStderr = 'E' // agent → host: a chunk of the job's stderr
	frameExit   = 'X' // agent → host: an agentExit (JSON); the job is over
)

const (
	maxChunk    = 32 << 10
	maxJobFrame = airlock.MaxJobBytes + 1<<20
	maxExit     = 4 << 10
)

func frameLimit(typ byte) (int, bool) {
	switch typ {
	case frameJob:
		return maxJobFrame, true
	case frameStdout, frameStderr:
		return maxChunk, true
	case frameExit:
		return maxExit, true
	}
	return 0, false
}

// agentJob is what the host hands a claimed sandbox.
type agentJob struct {
	Argv   []string          `json:"argv"`
	Env    []string          `json:"env"`
	Files  map[string]string `json:"files,omitempty"`
	Stdin  string            `json:"stdin,omitempty"`
	UID    int               `json:"uid"`
	NoFile uint64            `json:"nofile"`
	Output int64             `json:"output"` // forward at most this many bytes (+1 to show overflow)
}

// agentExit ends a job.
type agentExit struct {
	Code  int    `json:"code"`
	Error string `json:"error,omitempty"` // the agent could not start the job
	// Times measured inside the sandbox, in microseconds: from the job
	// frame to the program started, and to its exit.
	SpawnUS int64 `json:"spawn_us"`
	ExitUS  int64 `json:"exit_us"`
}

func writeFrame(w io.Writer, typ byte, payload []byte) error {
	var hdr [5]byte
	hdr[0] = typ
	binary.BigEndian.PutUint32(hdr[1:], uint32(len(payload)))
	if _, err := w.Write(append(hdr[:], payload...)); err != nil {
		return err
	}
	return nil
}

func writeJSONFrame(w io.Writer, typ byte, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if limit, _ := frameLimit(typ); len(data) > limit {
		return fmt.Errorf("frame %c of %d bytes exceeds %d", typ, len(data), limit)
	}
	return writeFrame(w, typ, data)
}

// readFrame reads one frame, refusing unknown types and oversized payloads.
func readFrame(r io.Reader) (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	limit, ok := frameLimit(hdr[0])
	if !ok {
		return 0, nil, fmt.Errorf("agent protocol: unknown frame type %#x", hdr[0])
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if int64(n) > int64(limit) {
		return 0, nil, fmt.Errorf("agent protocol: frame %c of %d bytes exceeds %d", hdr[0], n, limit)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		return 0, nil, fmt.Errorf("agent protocol: truncated frame: %w", err)
	}
	return hdr[0], buf, nil
}
