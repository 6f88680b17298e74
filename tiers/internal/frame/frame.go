// Package frame is the framing between a tier's host side and the agent
// inside its sandbox: the gVisor tier's agent and the microvm tier's guest
// /init both speak it, over a Unix socket and a virtio serial port.
//
// A frame is one type byte, a four-byte big-endian payload length and the
// payload. Each type has its own bound on the length, checked before
// anything is read, and Read allocates as the payload arrives rather than
// as its header announces: the side that reads may face a peer the
// sandboxed program controls, which must neither make it allocate beyond
// what it actually sends nor desynchronise the stream. A job's output
// travels inside Stdout and Stderr frames, never as raw bytes the reader
// would parse.
package frame

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Type says what a frame carries. Host to agent: Job, then Kill to stop
// the job's processes before they end. Agent to host:
// Ready, Stdout, Stderr, Files, Exit, Fail. A tier may use a subset.
type Type byte

// The frame types.
const (
	Job Type = 'J' // the job (JSON)
	// Kill asks the agent to kill every process of the job it runs (no
	// payload); it answers with the job's Exit as usual. A Kill that
	// finds no job running is ignored.
	Kill   Type = 'K'
	Ready  Type = 'R' // the agent is up and waits for its job (JSON)
	Stdout Type = 'O' // a chunk of the job's standard output
	Stderr Type = 'E' // a chunk of the job's standard error
	Exit   Type = 'X' // how the job ended (JSON): the job is over
	Fail   Type = 'F' // the agent could not run the job: a message
	// Files are the files a job's collect patterns named (JSON), sent
	// after the program has ended and before Exit.
	Files Type = 'C'
)

// Bounds on payloads.
const (
	// MaxJob bounds a job with its files and stdin, which JSON may
	// carry as base64 (a third larger) or as escaped strings.
	MaxJob   = 48 << 20
	MaxChunk = 64 << 10 // one chunk of output
	MaxSmall = 4 << 10  // Ready, Exit, Fail

	headerLen = 5
)

// ErrTooLarge is wrapped by Read and Write when a frame's length is above
// its type's bound.
var ErrTooLarge = errors.New("frame too large")

// ErrUnknownType is wrapped by Read and Write for a type byte that is none
// of the frame types.
var ErrUnknownType = errors.New("unknown frame type")

// Limit returns the bound on t's payload, and false for an unknown type.
func Limit(t Type) (int, bool) {
	switch t {
	case Job, Files:
		return MaxJob, true
	case Stdout, Stderr:
		return MaxChunk, true
	case Ready, Exit, Fail:
		return MaxSmall, true
	case Kill:
		return 0, true
	}
	return 0, false
}

func check(t Type, n uint64) error {
	max, ok := Limit(t)
	if !ok {
		return fmt.Errorf("%w %#x", ErrUnknownType, byte(t))
	}
	if n > uint64(max) {
		return fmt.Errorf("%c frame of %d bytes: %w (max %d)", byte(t), n, ErrTooLarge, max)
	}
	return nil
}

// Write writes one frame in a single Write call, so that frames written
// under a lock, or by one writer, never interleave.
func Write(w io.Writer, t Type, payload []byte) error {
	if err := check(t, uint64(len(payload))); err != nil {
		return err
	}
	buf := make([]byte, headerLen+len(payload))
	buf[0] = byte(t)
	binary.BigEndian.PutUint32(buf[1:headerLen], uint32(len(payload)))
	copy(buf[headerLen:], payload)
	_, err := w.Write(buf)
	return err
}

// WriteJSON writes v, encoded as JSON, as the payload of one frame.
func WriteJSON(w io.Writer, t Type, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return Write(w, t, b)
}

// Read reads one frame. It refuses an unknown type or a length above the
// type's bound from the header alone, and reports a stream that ends
// inside a frame as io.ErrUnexpectedEOF; io.EOF only at a frame boundary.
func Read(r io.Reader) (Type, []byte, error) { return ReadAllowed(r, nil) }

// ErrUnexpected is wrapped by ReadAllowed for a frame of a type it was
// told not to take.
var ErrUnexpected = errors.New("unexpected frame")

// ReadAllowed is Read for a reader that takes only the types allow
// admits (nil: every type): another type is refused from its header
// alone, before any of its payload is read, so that a peer cannot make
// the reader hold a frame (of up to MaxJob bytes) it never calls for.
// allow is called once per frame, with the header's type.
func ReadAllowed(r io.Reader, allow func(Type) bool) (Type, []byte, error) {
	var h [headerLen]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	t := Type(h[0])
	n := binary.BigEndian.Uint32(h[1:])
	if err := check(t, uint64(n)); err != nil {
		return 0, nil, err
	}
	if allow != nil && !allow(t) {
		return 0, nil, fmt.Errorf("%w %c", ErrUnexpected, byte(t))
	}
	// The buffer starts at one chunk and doubles only once it is full: a
	// header that announces more than follows costs at most twice what
	// did follow.
	size := int(n)
	buf := make([]byte, min(size, MaxChunk))
	for filled := 0; ; {
		if _, err := io.ReadFull(r, buf[filled:]); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return 0, nil, fmt.Errorf("truncated %c frame: %w", byte(t), err)
		}
		filled = len(buf)
		if filled == size {
			return t, buf, nil
		}
		buf = append(buf, make([]byte, min(size-filled, filled))...)
	}
}

// ChunkWriter turns writes into frames of type T, each at most MaxChunk
// bytes.
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
