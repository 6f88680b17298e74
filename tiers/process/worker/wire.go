package worker

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"strconv"
	"strings"

	"github.com/airlock-sandbox/airlock"
)

// The wire between the host and a worker is private to one binary (the
// worker is the host's own executable, passed as a descriptor), so it is a
// compact binary form rather than the public JSON wire format: on a claim
// both ends run with cold caches, and reflection-driven JSON cost tens of
// microseconds at each end where this costs a few.
//
// Every message is a frame: a 4-byte little-endian length, then that many
// bytes. The host sends one request frame; the worker sends a ready frame
// (one byte, frameReady) once it is confined and warm, then one result
// frame. Integers are varints (signed ones zig-zag), strings and byte
// strings are a length then the bytes, lists a count then the items, maps
// a count then key, value pairs.

const (
	frameReady = 'R'

	// MaxRequestBytes bounds a request frame: a job at its largest plus
	// the envelope.
	MaxRequestBytes = airlock.MaxJobBytes + 4096
	// resultSlack is a result frame's room beyond its value, stdout and
	// stderr (see [ResultLimit]).
	resultSlack = 64 << 10
)

// ResultLimit is the largest result frame the host accepts from a worker
// (which runs untrusted code and is not trusted either) for a job whose
// output is capped at outputBytes: the value, stdout and stderr each
// within the cap, and room for the rest.
func ResultLimit(outputBytes int64) int {
	return int(min(3*max(outputBytes, 0), 1<<40)) + resultSlack
}

// Value tags.
const (
	tagNil byte = iota
	tagFalse
	tagTrue
	tagInt
	tagFloat
	tagString
	tagBig
	tagList
	tagMap
	tagJSON // anything else a tier returned, in encoding/json's form
)

// Request is what the parent sends a worker: the limits of the envelope
// around the interpreter, and the job.
type Request struct {
	MemoryMB   int64
	CPUSeconds uint64
	Job        airlock.Job
}

// AppendRequest appends a request frame to dst. It fails for a job whose
// input holds a value that is not JSON-compatible (see
// [airlock.CheckValue]).
func AppendRequest(dst []byte, memoryMB int64, cpuSeconds uint64, job *airlock.Job) ([]byte, error) {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst = binary.AppendVarint(dst, memoryMB)
	dst = binary.AppendUvarint(dst, cpuSeconds)
	dst, err := appendJob(dst, job)
	if err != nil {
		return dst[:start], err
	}
	return endFrame(dst, start, MaxRequestBytes)
}

// ReadRequest reads one request frame from r.
func ReadRequest(r io.Reader) (Request, error) {
	data, err := readFrame(r, MaxRequestBytes)
	if err != nil {
		return Request{}, fmt.Errorf("reading job: %w", err)
	}
	d := decoder{b: data}
	req := Request{MemoryMB: d.varint(), CPUSeconds: d.uvarint()}
	req.Job = d.job()
	if d.err == nil && len(d.b) > 0 {
		d.fail("trailing bytes")
	}
	if d.err == nil && req.MemoryMB < 0 {
		d.fail("negative memory limit")
	}
	if d.err != nil {
		return Request{}, fmt.Errorf("reading job: %w", d.err)
	}
	return req, nil
}

// AppendResult appends a result frame to dst. The fields the host
// replaces (tier, level, clock, seed) are left out.
func AppendResult(dst []byte, res *airlock.Result) ([]byte, error) {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst, err := appendValue(dst, res.Value, 0)
	if err != nil {
		return dst[:start], fmt.Errorf("result value: %w", err)
	}
	dst = appendString(dst, res.Stdout)
	dst = appendString(dst, res.Stderr)
	dst = binary.AppendVarint(dst, int64(res.ExitCode))
	if s := res.Stopped; s != nil {
		dst = append(dst, 1)
		dst = appendString(dst, string(s.Reason))
		dst = appendString(dst, s.Detail)
	} else {
		dst = append(dst, 0)
	}
	if e := res.Error; e != nil {
		dst = append(dst, 1)
		dst = appendString(dst, string(e.Kind))
		dst = appendString(dst, e.Message)
	} else {
		dst = append(dst, 0)
	}
	for _, v := range [...]int64{res.Timings.StartUS, res.Timings.RunUS, res.Timings.TotalUS,
		res.Usage.Steps, res.Usage.MemoryBytes, res.Usage.OutputBytes, res.Usage.CPUUS} {
		dst = binary.AppendVarint(dst, v)
	}
	dst = appendStrings(dst, res.Decision)
	return endFrame(dst, start, math.MaxUint32)
}

// ReadResult reads the result frame a worker sent, of at most limit bytes.
// The worker is not trusted: lengths, nesting and values are checked as
// they are read.
func ReadResult(r io.Reader, limit int) (airlock.Result, error) {
	data, err := readFrame(r, limit)
	if err != nil {
		return airlock.Result{}, err
	}
	return decodeResult(data)
}

func decodeResult(data []byte) (airlock.Result, error) {
	d := decoder{b: data}
	var res airlock.Result
	res.Value = d.value(0)
	res.Stdout, res.Stderr = d.string(), d.string()
	res.ExitCode = int(d.varint())
	if d.flag() {
		res.Stopped = &airlock.Stop{Reason: airlock.StopReason(d.string()), Detail: d.string()}
	}
	if d.flag() {
		res.Error = &airlock.ErrorInfo{Kind: airlock.ErrorKind(d.string()), Message: d.string()}
	}
	for _, p := range [...]*int64{&res.Timings.StartUS, &res.Timings.RunUS, &res.Timings.TotalUS,
		&res.Usage.Steps, &res.Usage.MemoryBytes, &res.Usage.OutputBytes, &res.Usage.CPUUS} {
		*p = d.varint()
	}
	res.Decision = d.strings()
	if d.err == nil && len(d.b) > 0 {
		d.fail("trailing bytes")
	}
	if d.err != nil {
		return airlock.Result{}, fmt.Errorf("malformed result: %w", d.err)
	}
	return res, nil
}

// WriteReady writes the ready frame.
func WriteReady(w io.Writer) error {
	_, err := w.Write([]byte{1, 0, 0, 0, frameReady})
	return err
}

// ReadReady reads the ready frame.
func ReadReady(r io.Reader) error {
	data, err := readFrame(r, 1)
	if err != nil {
		return err
	}
	if len(data) != 1 || data[0] != frameReady {
		return errors.New("not a ready frame")
	}
	return nil
}

func endFrame(dst []byte, start, limit int) ([]byte, error) {
	n := len(dst) - start - 4
	if n > limit {
		return dst[:start], fmt.Errorf("message of %d bytes is over the limit of %d", n, limit)
	}
	binary.LittleEndian.PutUint32(dst[start:], uint32(n))
	return dst, nil
}

func readFrame(r io.Reader, limit int) ([]byte, error) {
	var head [4]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		if err == io.EOF {
			return nil, io.ErrUnexpectedEOF // the peer ended without a message
		}
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

func appendJob(dst []byte, j *airlock.Job) ([]byte, error) {
	dst = appendString(dst, string(j.Kind))
	dst = appendString(dst, j.Code)
	dst = appendString(dst, string(j.Module))
	dst = appendString(dst, j.Entry)
	dst = appendStrings(dst, j.Argv)
	dst = appendString(dst, j.Stdin)
	if j.Input == nil {
		dst = append(dst, tagNil)
	} else {
		var err error
		if dst, err = appendValue(dst, j.Input, 0); err != nil {
			return dst, fmt.Errorf("input: %w", err)
		}
	}
	dst = appendStringMap(dst, j.Files)
	g := &j.Grants
	dst = appendStrings(dst, g.FS.Read)
	dst = binary.AppendVarint(dst, g.FS.ScratchMB)
	dst = appendCount(dst, g.Net == nil, len(g.Net))
	for _, r := range g.Net {
		dst = appendString(dst, r.Host)
		dst = appendStrings(dst, r.Methods)
		dst = appendCount(dst, r.Ports == nil, len(r.Ports))
		for _, p := range r.Ports {
			dst = binary.AppendVarint(dst, int64(p))
		}
	}
	dst = appendBool(dst, g.Spawn)
	dst = appendStringMap(dst, g.Secrets)
	l := &j.Limits
	for _, v := range [...]int64{l.WallMS, l.CPUMS, l.MemoryMB, l.OutputBytes, l.Pids, l.Files, l.Steps} {
		dst = binary.AppendVarint(dst, v)
	}
	if j.Clock.IsZero() {
		dst = append(dst, 0)
	} else {
		clock, err := j.Clock.MarshalBinary()
		if err != nil {
			return dst, fmt.Errorf("clock: %w", err)
		}
		dst = append(dst, 1)
		dst = appendString(dst, string(clock))
	}
	dst = binary.AppendUvarint(dst, j.Seed)
	dst = appendString(dst, string(j.Situation))
	dst = appendString(dst, string(j.Lifecycle))
	dst = appendString(dst, j.Session)
	dst = appendString(dst, j.Tier)
	return dst, nil
}

func (d *decoder) job() airlock.Job {
	var j airlock.Job
	j.Kind = airlock.Kind(d.string())
	j.Code = d.string()
	if m := d.bytes(); len(m) > 0 {
		j.Module = m
	}
	j.Entry = d.string()
	j.Argv = d.strings()
	j.Stdin = d.string()
	switch in := d.value(0).(type) {
	case nil:
	case map[string]any:
		j.Input = in
	default:
		d.fail("input is not an object")
	}
	j.Files = d.stringMap()
	g := &j.Grants
	g.FS.Read = d.strings()
	g.FS.ScratchMB = d.varint()
	if n, ok := d.count(); ok {
		g.Net = make([]airlock.NetRule, n)
		for i := range g.Net {
			r := &g.Net[i]
			r.Host, r.Methods = d.string(), d.strings()
			if n, ok := d.count(); ok {
				r.Ports = make([]int, n)
				for k := range r.Ports {
					r.Ports[k] = int(d.varint())
				}
			}
		}
	}
	g.Spawn = d.flag()
	g.Secrets = d.stringMap()
	l := &j.Limits
	for _, p := range [...]*int64{&l.WallMS, &l.CPUMS, &l.MemoryMB, &l.OutputBytes, &l.Pids, &l.Files, &l.Steps} {
		*p = d.varint()
	}
	if d.flag() {
		if err := j.Clock.UnmarshalBinary(d.bytes()); err != nil {
			d.fail("clock: " + err.Error())
		}
	}
	j.Seed = d.uvarint()
	j.Situation = airlock.Situation(d.string())
	j.Lifecycle = airlock.Lifecycle(d.string())
	j.Session = d.string()
	j.Tier = d.string()
	return j
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

func appendBool(dst []byte, b bool) []byte {
	if b {
		return append(dst, 1)
	}
	return append(dst, 0)
}

// appendCount writes a list's length, keeping nil apart from empty: 0 is
// nil, n+1 a list of n.
func appendCount(dst []byte, isNil bool, n int) []byte {
	if isNil {
		return append(dst, 0)
	}
	return binary.AppendUvarint(dst, uint64(n)+1)
}

func appendStrings(dst []byte, ss []string) []byte {
	dst = appendCount(dst, ss == nil, len(ss))
	for _, s := range ss {
		dst = appendString(dst, s)
	}
	return dst
}

func appendStringMap(dst []byte, m map[string]string) []byte {
	dst = appendCount(dst, m == nil, len(m))
	for k, v := range m {
		dst = appendString(dst, k)
		dst = appendString(dst, v)
	}
	return dst
}

// appendValue encodes a JSON-compatible value; json.Number becomes what
// [airlock.NormalizeInput] makes of it, as the JSON wire would have.
func appendValue(dst []byte, v any, depth int) ([]byte, error) {
	if depth > airlock.MaxValueDepth {
		return dst, fmt.Errorf("nested more than %d deep", airlock.MaxValueDepth)
	}
	switch x := v.(type) {
	case nil:
		return append(dst, tagNil), nil
	case bool:
		if x {
			return append(dst, tagTrue), nil
		}
		return append(dst, tagFalse), nil
	case int64:
		return binary.AppendVarint(append(dst, tagInt), x), nil
	case int:
		return binary.AppendVarint(append(dst, tagInt), int64(x)), nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return dst, fmt.Errorf("%v is not a JSON number", x)
		}
		return binary.LittleEndian.AppendUint64(append(dst, tagFloat), math.Float64bits(x)), nil
	case string:
		return appendString(append(dst, tagString), x), nil
	case *big.Int:
		if x == nil {
			return dst, errors.New("nil integer")
		}
		if x.IsInt64() {
			return binary.AppendVarint(append(dst, tagInt), x.Int64()), nil
		}
		return appendString(append(dst, tagBig), x.String()), nil
	case json.Number:
		n, err := airlock.NormalizeInput(x)
		if err != nil {
			return dst, err
		}
		return appendValue(dst, n, depth)
	case []any:
		dst = binary.AppendUvarint(append(dst, tagList), uint64(len(x)))
		for _, e := range x {
			var err error
			if dst, err = appendValue(dst, e, depth+1); err != nil {
				return dst, err
			}
		}
		return dst, nil
	case map[string]any:
		dst = binary.AppendUvarint(append(dst, tagMap), uint64(len(x)))
		for k, e := range x {
			dst = appendString(dst, k)
			var err error
			if dst, err = appendValue(dst, e, depth+1); err != nil {
				return dst, err
			}
		}
		return dst, nil
	}
	// A type outside the exported set (a tier registered by a library
	// user may return one): encoding/json's form, decoded as the JSON
	// wire would.
	raw, err := json.Marshal(v)
	if err != nil {
		return dst, err
	}
	return appendString(append(dst, tagJSON), string(raw)), nil
}

// decoder reads the binary form; the first error sticks and every later
// read returns zero values.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(msg string) {
	if d.err == nil {
		d.err = errors.New(msg)
	}
	d.b = nil
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("truncated or overlong integer")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("truncated or overlong integer")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) byte() byte {
	if len(d.b) == 0 {
		d.fail("truncated")
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) flag() bool {
	switch d.byte() {
	case 0:
		return false
	case 1:
		return true
	}
	d.fail("bad flag")
	return false
}

// bytes returns the next byte string, aliasing the frame.
func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail("length past the end")
		return nil
	}
	s := d.b[:n:n]
	d.b = d.b[n:]
	return s
}

func (d *decoder) string() string { return string(d.bytes()) }

// count reads a list's length (see appendCount); ok is false for nil. A
// count is bounded by the bytes left, since every item takes at least one.
func (d *decoder) count() (int, bool) {
	n := d.uvarint()
	if n == 0 {
		return 0, false
	}
	if n-1 > uint64(len(d.b)) {
		d.fail("count past the end")
		return 0, false
	}
	return int(n - 1), true
}

func (d *decoder) strings() []string {
	n, ok := d.count()
	if !ok {
		return nil
	}
	ss := make([]string, n)
	for i := range ss {
		ss[i] = d.string()
	}
	return ss
}

func (d *decoder) stringMap() map[string]string {
	n, ok := d.count()
	if !ok {
		return nil
	}
	m := make(map[string]string, n)
	for range n {
		k := d.string()
		m[k] = d.string()
	}
	return m
}

func (d *decoder) value(depth int) any {
	if depth > airlock.MaxValueDepth {
		d.fail(fmt.Sprintf("value nested more than %d deep", airlock.MaxValueDepth))
		return nil
	}
	switch tag := d.byte(); tag {
	case tagNil:
		return nil
	case tagFalse:
		return false
	case tagTrue:
		return true
	case tagInt:
		return d.varint()
	case tagFloat:
		if len(d.b) < 8 {
			d.fail("truncated number")
			return nil
		}
		f := math.Float64frombits(binary.LittleEndian.Uint64(d.b))
		d.b = d.b[8:]
		if math.IsNaN(f) || math.IsInf(f, 0) {
			d.fail("number that JSON cannot hold")
			return nil
		}
		return f
	case tagString:
		return d.string()
	case tagBig:
		s := d.string()
		if b, ok := new(big.Int).SetString(s, 10); ok && !b.IsInt64() && !strings.HasPrefix(s, "+") {
			return b
		}
		d.fail("bad big integer " + strconv.Quote(s))
		return nil
	case tagList:
		n := d.uvarint()
		if n > uint64(len(d.b)) {
			d.fail("count past the end")
			return nil
		}
		l := make([]any, n)
		for i := range l {
			l[i] = d.value(depth + 1)
		}
		return l
	case tagMap:
		n := d.uvarint()
		if n > uint64(len(d.b)) {
			d.fail("count past the end")
			return nil
		}
		m := make(map[string]any, n)
		for range n {
			k := d.string()
			m[k] = d.value(depth + 1)
		}
		return m
	case tagJSON:
		raw := d.bytes()
		if d.err != nil {
			return nil
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil || dec.More() {
			d.fail(fmt.Sprintf("bad JSON value (%v)", err))
			return nil
		}
		v, err := airlock.NormalizeInput(v)
		if err == nil {
			err = airlock.CheckValue(v, depth)
		}
		if err != nil {
			d.fail(err.Error())
			return nil
		}
		return v
	default:
		d.fail(fmt.Sprintf("unknown value tag %d", tag))
		return nil
	}
}
