// Package wire is the binary encoding the process package speaks with its
// own processes (stages, the spawner, guarded workers), which are always
// the same build as the host: messages in length-prefixed frames, varint
// integers (signed ones zig-zag), strings as a length then the bytes,
// lists and maps as a count then the items. It replaces JSON on those
// paths because they run in fresh or long-idle processes, where
// reflection-driven decoding costs tens to hundreds of microseconds and
// this costs a few. It imports only the standard library, so the stage
// binary stays small.
package wire

import (
	"embed"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Sources is this package's code: the stage's code digest covers it, since
// the stage speaks this encoding.
//
//go:embed *.go
var Sources embed.FS

// Begin starts a frame in dst: it appends the length's placeholder and
// returns where the frame starts, for End.
func Begin(dst []byte) ([]byte, int) { return append(dst, 0, 0, 0, 0), len(dst) }

// End fills in the length of the frame begun at start; a frame over limit
// bytes is an error (and dst is cut back to start).
func End(dst []byte, start, limit int) ([]byte, error) {
	n := len(dst) - start - 4
	if n > limit || n > 1<<32-1 {
		return dst[:start], fmt.Errorf("message of %d bytes is over the limit of %d", n, limit)
	}
	binary.LittleEndian.PutUint32(dst[start:], uint32(n))
	return dst, nil
}

// ReadFrame reads one frame of at most limit bytes. A stream that ends
// before a frame begins is io.EOF; one that ends inside a frame is
// io.ErrUnexpectedEOF.
func ReadFrame(r io.Reader, limit int) ([]byte, error) {
	var head [4]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, err
	}
	n := binary.LittleEndian.Uint32(head[:])
	if uint64(n) > uint64(limit) {
		return nil, fmt.Errorf("message of %d bytes is over the limit of %d", n, limit)
	}
	data := make([]byte, n)
	if _, err := io.ReadFull(r, data); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return data, nil
}

// String appends a string.
func String(dst []byte, s string) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(s))), s...)
}

// Bytes appends a byte string.
func Bytes(dst, b []byte) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(b))), b...)
}

// Bool appends a flag.
func Bool(dst []byte, b bool) []byte {
	if b {
		return append(dst, 1)
	}
	return append(dst, 0)
}

// Int appends a signed integer.
func Int(dst []byte, v int64) []byte { return binary.AppendVarint(dst, v) }

// Uint appends an unsigned integer.
func Uint(dst []byte, v uint64) []byte { return binary.AppendUvarint(dst, v) }

// Count appends a list's length, keeping nil apart from empty: 0 is nil,
// n+1 a list of n.
func Count(dst []byte, isNil bool, n int) []byte {
	if isNil {
		return append(dst, 0)
	}
	return binary.AppendUvarint(dst, uint64(n)+1)
}

// Strings appends a list of strings.
func Strings(dst []byte, ss []string) []byte {
	dst = Count(dst, ss == nil, len(ss))
	for _, s := range ss {
		dst = String(dst, s)
	}
	return dst
}

// StringMap appends a map of strings (in the map's order).
func StringMap(dst []byte, m map[string]string) []byte {
	dst = Count(dst, m == nil, len(m))
	for k, v := range m {
		dst = String(String(dst, k), v)
	}
	return dst
}

// Decoder reads the encoding from a frame. The first error sticks: every
// later read returns a zero value, and Done reports it.
type Decoder struct {
	B   []byte // what is left to read
	Err error
}

// Fail records an error (the first one counts) and stops reading.
func (d *Decoder) Fail(msg string) {
	if d.Err == nil {
		d.Err = errors.New(msg)
	}
	d.B = nil
}

// Done returns the first error, or one for bytes left over.
func (d *Decoder) Done() error {
	if d.Err == nil && len(d.B) > 0 {
		d.Fail(fmt.Sprintf("%d trailing bytes", len(d.B)))
	}
	return d.Err
}

// Uint reads an unsigned integer.
func (d *Decoder) Uint() uint64 {
	v, n := binary.Uvarint(d.B)
	if n <= 0 {
		d.Fail("truncated or overlong integer")
		return 0
	}
	d.B = d.B[n:]
	return v
}

// Int reads a signed integer.
func (d *Decoder) Int() int64 {
	v, n := binary.Varint(d.B)
	if n <= 0 {
		d.Fail("truncated or overlong integer")
		return 0
	}
	d.B = d.B[n:]
	return v
}

// Uint32 reads an unsigned integer that must fit in 32 bits (a uid).
func (d *Decoder) Uint32() uint32 {
	v := d.Uint()
	if v > 1<<32-1 {
		d.Fail("integer out of 32-bit range")
		return 0
	}
	return uint32(v)
}

// Byte reads one byte.
func (d *Decoder) Byte() byte {
	if len(d.B) == 0 {
		d.Fail("truncated")
		return 0
	}
	c := d.B[0]
	d.B = d.B[1:]
	return c
}

// Bool reads a flag (0 or 1).
func (d *Decoder) Bool() bool {
	switch d.Byte() {
	case 0:
		return false
	case 1:
		return true
	}
	d.Fail("bad flag")
	return false
}

// Bytes reads a byte string; it aliases the frame.
func (d *Decoder) Bytes() []byte {
	n := d.Uint()
	if n > uint64(len(d.B)) {
		d.Fail("length past the end")
		return nil
	}
	s := d.B[:n:n]
	d.B = d.B[n:]
	return s
}

// String reads a string.
func (d *Decoder) String() string { return string(d.Bytes()) }

// Count reads a list's length (see Count); ok is false for nil. A count is
// bounded by the bytes left, since every item takes at least one.
func (d *Decoder) Count() (n int, ok bool) {
	c := d.Uint()
	if c == 0 {
		return 0, false
	}
	if c-1 > uint64(len(d.B)) {
		d.Fail("count past the end")
		return 0, false
	}
	return int(c - 1), true
}

// Strings reads a list of strings.
func (d *Decoder) Strings() []string {
	n, ok := d.Count()
	if !ok {
		return nil
	}
	ss := make([]string, n)
	for i := range ss {
		ss[i] = d.String()
	}
	return ss
}

// StringMap reads a map of strings.
func (d *Decoder) StringMap() map[string]string {
	n, ok := d.Count()
	if !ok {
		return nil
	}
	m := make(map[string]string, n)
	for range n {
		k := d.String()
		m[k] = d.String()
	}
	return m
}
