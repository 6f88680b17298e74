// Package wire is the framed protocol between the microvm tier's host side
// and the agent that is the guest's /init.
//
// Every message is a frame: one type byte, a four-byte big-endian length and
// that many bytes of payload. Lengths are bounded per type, so a hostile
// guest can neither make the host allocate without bound nor desynchronise
// the stream: the host reads only frames, and the job's own output travels
// inside Stdout and Stderr frames written by the agent, never as raw bytes
// the host would parse.
package wire

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// Type says what a frame carries.
type Type byte

// The frame types. Host to guest: Job. Guest to host: Ready, Stdout,
// Stderr, Exit, Fail.
const (
	TypeJob    Type = 'J' // a JSON Job
	TypeReady  Type = 'R' // the agent is up and waits for its job (a JSON Ready)
	TypeStdout Type = 'O' // a chunk of the job's standard output
	TypeStderr Type = 'E' // a chunk of the job's standard error
	TypeExit   Type = 'X' // a JSON Exit: the job has finished
	TypeFail   Type = 'F' // the agent could not run the job: a message
)

// Bounds on payloads.
const (
	MaxJob   = 48 << 20 // a job with its files and stdin
	MaxChunk = 64 << 10 // one chunk of output
	MaxSmall = 4 << 10  // Ready, Exit, Fail
	header   = 5
)

// ErrTooLarge is wrapped by Read when a frame's length is above its bound.
var ErrTooLarge = errors.New("frame too large")

// Job is what the host hands the agent.
type Job struct {
	Argv []string          `json:"argv"`
	Env  map[string]string `json:"env,omitempty"` // the job's whole environment: its granted secrets
	// Files and Stdin are bytes (base64 in JSON), so content that is not
	// UTF-8 reaches the guest unchanged.
	Files map[string][]byte `json:"files,omitempty"`
	Stdin []byte            `json:"stdin,omitempty"`
	// Clock is the wall-clock instant the guest is set to before the job starts.
	Clock time.Time `json:"clock"`
	// Entropy is fresh host randomness mixed into the guest's pool (and the
	// guest CRNG reseeded) before the job starts: a restored snapshot or a
	// pooled VM never replays another run's random numbers.
	Entropy []byte `json:"entropy"`
	// Limits applied inside the guest.
	MemoryMB  int64 `json:"memory_mb"`
	CPUMS     int64 `json:"cpu_ms"`
	Pids      int64 `json:"pids"`
	OpenFiles int64 `json:"open_files"`
	ScratchMB int64 `json:"scratch_mb"`
	Spawn     bool  `json:"spawn"`
	// Net, when set, configures the guest's one network interface for a
	// job granted egress (the VM was booted with it).
	Net *Net `json:"net,omitempty"`
}

// Net is the guest side of the egress wiring: the interface's address (no
// default route: only the subnet, on which QEMU's restricted user network
// answers nothing but the guestfwd to the egress proxy) and the gateway's
// CA certificate, written to CAPath before the root turns read-only.
type Net struct {
	Addr   string `json:"addr"` // CIDR, e.g. 10.0.2.15/24
	CA     []byte `json:"ca"`
	CAPath string `json:"ca_path"`
}

// Ready is the agent's report that it waits for its job: its protocol
// version, and how long the guest took to reach each step of its start-up
// (informational, for the host's measurements).
type Ready struct {
	// Version is the agent's protocol version; the host refuses any other
	// (an agent built from older sources would misread the Job frame).
	Version int    `json:"version"`
	Marks   []Mark `json:"marks,omitempty"`
}

// Version is this protocol's version: 2 carries files and stdin as bytes.
const Version = 2

// Mark is one step of the guest's start-up and when it ended, in
// microseconds since the guest kernel started (CLOCK_BOOTTIME).
type Mark struct {
	Step string `json:"step"`
	US   int64  `json:"us"`
}

// Exit is how the job ended.
type Exit struct {
	Code   int    `json:"code"`
	Signal string `json:"signal,omitempty"`
	// Reason, when set, is a limit that stopped the job inside the guest:
	// "memory", "cpu" or "pids".
	Reason string `json:"reason,omitempty"`
	// Marks are the steps of the job's run inside the guest (informational,
	// like Ready's).
	Marks []Mark `json:"marks,omitempty"`
}

func limit(t Type) (int, error) {
	switch t {
	case TypeJob:
		return MaxJob, nil
	case TypeStdout, TypeStderr:
		return MaxChunk, nil
	case TypeReady, TypeExit, TypeFail:
		return MaxSmall, nil
	}
	return 0, fmt.Errorf("unknown frame type %#x", byte(t))
}

// Write writes one frame.
func Write(w io.Writer, t Type, payload []byte) error {
	max, err := limit(t)
	if err != nil {
		return err
	}
	if len(payload) > max {
		return fmt.Errorf("writing %c frame of %d bytes: %w (max %d)", t, len(payload), ErrTooLarge, max)
	}
	buf := make([]byte, header+len(payload))
	buf[0] = byte(t)
	binary.BigEndian.PutUint32(buf[1:header], uint32(len(payload)))
	copy(buf[header:], payload)
	_, err = w.Write(buf)
	return err
}

// WriteJSON writes v as the payload of one frame.
func WriteJSON(w io.Writer, t Type, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return Write(w, t, b)
}

// Read reads one frame, refusing unknown types and lengths above the
// type's bound before allocating.
func Read(r io.Reader) (Type, []byte, error) {
	var h [header]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	t := Type(h[0])
	max, err := limit(t)
	if err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(h[1:])
	if uint64(n) > uint64(max) {
		return 0, nil, fmt.Errorf("%c frame of %d bytes: %w (max %d)", t, n, ErrTooLarge, max)
	}
	payload := make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	return t, payload, nil
}

// ChunkWriter turns writes into frames of type T, each at most MaxChunk.
type ChunkWriter struct {
	W io.Writer
	T Type
}

func (c ChunkWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := min(len(p), MaxChunk)
		if err := Write(c.W, c.T, p[:k]); err != nil {
			return n, err
		}
		n += k
		p = p[k:]
	}
	return n, nil
}
