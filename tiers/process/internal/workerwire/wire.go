// Package workerwire is the wire between the process tier and a guarded
// worker: one binary at both ends, so it is private to the tier.
package workerwire

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
	"github.com/airlock-sandbox/airlock/internal/value"
	"github.com/airlock-sandbox/airlock/tiers/process/internal/wire"
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
	MaxRequestBytes = value.MaxJobBytes + 4096
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
	dst, start := wire.Begin(dst)
	dst = binary.AppendVarint(dst, memoryMB)
	dst = binary.AppendUvarint(dst, cpuSeconds)
	dst, err := appendJob(dst, job)
	if err != nil {
		return dst[:start], err
	}
	return wire.End(dst, start, MaxRequestBytes)
}

// ReadRequest reads one request frame from r.
func ReadRequest(r io.Reader) (Request, error) {
	data, err := wire.ReadFrame(r, MaxRequestBytes)
	if err != nil {
		return Request{}, fmt.Errorf("reading job: %w", err)
	}
	d := decoder{wire.Decoder{B: data}}
	req := Request{MemoryMB: d.Int(), CPUSeconds: d.Uint()}
	req.Job = d.job()
	if d.Done() == nil && req.MemoryMB < 0 {
		d.Fail("negative memory limit")
	}
	if d.Err != nil {
		return Request{}, fmt.Errorf("reading job: %w", d.Err)
	}
	return req, nil
}

// AppendResult appends a result frame to dst. The fields the host
// replaces (tier, level, clock, seed) are left out.
func AppendResult(dst []byte, res *airlock.Result) ([]byte, error) {
	dst, start := wire.Begin(dst)
	dst, err := appendValue(dst, res.Value, 0)
	if err != nil {
		return dst[:start], fmt.Errorf("result value: %w", err)
	}
	dst = wire.String(dst, res.Stdout)
	dst = wire.String(dst, res.Stderr)
	dst = binary.AppendVarint(dst, int64(res.ExitCode))
	if s := res.Stopped; s != nil {
		dst = append(dst, 1)
		dst = wire.String(dst, string(s.Reason))
		dst = wire.String(dst, s.Detail)
	} else {
		dst = append(dst, 0)
	}
	if e := res.Error; e != nil {
		dst = append(dst, 1)
		dst = wire.String(dst, string(e.Kind))
		dst = wire.String(dst, e.Message)
	} else {
		dst = append(dst, 0)
	}
	for _, v := range [...]int64{res.Timings.StartUS, res.Timings.RunUS, res.Timings.TotalUS,
		res.Usage.Steps, res.Usage.MemoryBytes, res.Usage.OutputBytes, res.Usage.CPUUS} {
		dst = binary.AppendVarint(dst, v)
	}
	dst = wire.String(dst, res.Image)
	dst = wire.Strings(dst, res.Decision)
	dst = wire.StringMap(dst, res.Files)
	dst = wire.Strings(dst, res.FilesSkipped)
	return wire.End(dst, start, math.MaxUint32)
}

// ReadResult reads the result frame a worker sent, of at most limit bytes.
// The worker is not trusted: lengths, nesting and values are checked as
// they are read.
func ReadResult(r io.Reader, limit int) (airlock.Result, error) {
	data, err := wire.ReadFrame(r, limit)
	if err != nil {
		return airlock.Result{}, err
	}
	return decodeResult(data)
}

func decodeResult(data []byte) (airlock.Result, error) {
	d := decoder{wire.Decoder{B: data}}
	var res airlock.Result
	res.Value = d.value(0)
	res.Stdout, res.Stderr = d.String(), d.String()
	res.ExitCode = int(d.Int())
	if d.Bool() {
		res.Stopped = &airlock.Stop{Reason: airlock.StopReason(d.String()), Detail: d.String()}
	}
	if d.Bool() {
		res.Error = &airlock.ErrorInfo{Kind: airlock.ErrorKind(d.String()), Message: d.String()}
	}
	for _, p := range [...]*int64{&res.Timings.StartUS, &res.Timings.RunUS, &res.Timings.TotalUS,
		&res.Usage.Steps, &res.Usage.MemoryBytes, &res.Usage.OutputBytes, &res.Usage.CPUUS} {
		*p = d.Int()
	}
	res.Image = d.String()
	res.Decision = d.Strings()
	res.Files = d.StringMap()
	res.FilesSkipped = d.Strings()
	if d.Done() != nil {
		return airlock.Result{}, fmt.Errorf("malformed result: %w", d.Err)
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
	data, err := wire.ReadFrame(r, 1)
	if err != nil {
		return err
	}
	if len(data) != 1 || data[0] != frameReady {
		return errors.New("not a ready frame")
	}
	return nil
}

func appendJob(dst []byte, j *airlock.Job) ([]byte, error) {
	dst = wire.String(dst, string(j.Kind))
	dst = wire.String(dst, j.Code)
	dst = wire.String(dst, string(j.Module))
	dst = wire.String(dst, j.Entry)
	dst = wire.Strings(dst, j.Argv)
	dst = wire.String(dst, j.Stdin)
	if j.Input == nil {
		dst = append(dst, tagNil)
	} else {
		var err error
		if dst, err = appendValue(dst, j.Input, 0); err != nil {
			return dst, fmt.Errorf("input: %w", err)
		}
	}
	dst = wire.StringMap(dst, j.Files)
	dst = wire.Strings(dst, j.Collect)
	dst = wire.StringMap(dst, j.Env)
	dst = wire.String(dst, j.Image)
	g := &j.Grants
	dst = wire.Strings(dst, g.FS.Read)
	dst = wire.StringMap(dst, g.FS.At)
	dst = wire.Strings(dst, g.FS.Copy)
	dst = binary.AppendVarint(dst, g.FS.ScratchMB)
	dst = wire.Count(dst, g.Net == nil, len(g.Net))
	for _, r := range g.Net {
		dst = wire.String(dst, r.Host)
		dst = wire.Strings(dst, r.Methods)
		dst = wire.Count(dst, r.Ports == nil, len(r.Ports))
		for _, p := range r.Ports {
			dst = binary.AppendVarint(dst, int64(p))
		}
		dst = wire.String(dst, r.Scheme)
		dst = wire.Strings(dst, r.Paths)
	}
	dst = wire.Bool(dst, g.Spawn)
	dst = wire.StringMap(dst, g.Secrets)
	dst = wire.Count(dst, g.Credentials == nil, len(g.Credentials))
	for _, c := range g.Credentials {
		dst = wire.String(dst, c.Env)
		dst = wire.String(dst, c.Ref)
	}
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
		dst = wire.String(dst, string(clock))
	}
	dst = binary.AppendUvarint(dst, j.Seed)
	dst = wire.String(dst, string(j.Situation))
	dst = wire.String(dst, string(j.Lifecycle))
	dst = wire.String(dst, j.Session)
	dst = wire.String(dst, j.Tier)
	dst = wire.String(dst, j.Account)
	return dst, nil
}

func (d *decoder) job() airlock.Job {
	var j airlock.Job
	j.Kind = airlock.Kind(d.String())
	j.Code = d.String()
	if m := d.Bytes(); len(m) > 0 {
		j.Module = m
	}
	j.Entry = d.String()
	j.Argv = d.Strings()
	j.Stdin = d.String()
	switch in := d.value(0).(type) {
	case nil:
	case map[string]any:
		j.Input = in
	default:
		d.Fail("input is not an object")
	}
	j.Files = d.StringMap()
	j.Collect = d.Strings()
	j.Env = d.StringMap()
	j.Image = d.String()
	g := &j.Grants
	g.FS.Read = d.Strings()
	g.FS.At = d.StringMap()
	g.FS.Copy = d.Strings()
	g.FS.ScratchMB = d.Int()
	if n, ok := d.Count(); ok {
		g.Net = make([]airlock.NetRule, n)
		for i := range g.Net {
			r := &g.Net[i]
			r.Host, r.Methods = d.String(), d.Strings()
			if n, ok := d.Count(); ok {
				r.Ports = make([]int, n)
				for k := range r.Ports {
					r.Ports[k] = int(d.Int())
				}
			}
			r.Scheme, r.Paths = d.String(), d.Strings()
		}
	}
	g.Spawn = d.Bool()
	g.Secrets = d.StringMap()
	if n, ok := d.Count(); ok {
		g.Credentials = make([]airlock.Credential, n)
		for i := range g.Credentials {
			g.Credentials[i].Env, g.Credentials[i].Ref = d.String(), d.String()
		}
	}
	l := &j.Limits
	for _, p := range [...]*int64{&l.WallMS, &l.CPUMS, &l.MemoryMB, &l.OutputBytes, &l.Pids, &l.Files, &l.Steps} {
		*p = d.Int()
	}
	if d.Bool() {
		if err := j.Clock.UnmarshalBinary(d.Bytes()); err != nil {
			d.Fail("clock: " + err.Error())
		}
	}
	j.Seed = d.Uint()
	j.Situation = airlock.Situation(d.String())
	j.Lifecycle = airlock.Lifecycle(d.String())
	j.Session = d.String()
	j.Tier = d.String()
	j.Account = d.String()
	return j
}

// appendValue encodes a JSON-compatible value; json.Number becomes what
// [airlock.NormalizeInput] makes of it, as the JSON wire would have.
func appendValue(dst []byte, v any, depth int) ([]byte, error) {
	if depth > value.MaxDepth {
		return dst, fmt.Errorf("nested more than %d deep", value.MaxDepth)
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
		return wire.String(append(dst, tagString), x), nil
	case *big.Int:
		if x == nil {
			return dst, errors.New("nil integer")
		}
		if x.IsInt64() {
			return binary.AppendVarint(append(dst, tagInt), x.Int64()), nil
		}
		return wire.String(append(dst, tagBig), x.String()), nil
	case json.Number:
		n, err := value.Normalize(x)
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
			dst = wire.String(dst, k)
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
	return wire.String(append(dst, tagJSON), string(raw)), nil
}

// decoder adds the Job and value forms to the wire's decoder.
type decoder struct{ wire.Decoder }

func (d *decoder) value(depth int) any {
	if depth > value.MaxDepth {
		d.Fail(fmt.Sprintf("value nested more than %d deep", value.MaxDepth))
		return nil
	}
	switch tag := d.Byte(); tag {
	case tagNil:
		return nil
	case tagFalse:
		return false
	case tagTrue:
		return true
	case tagInt:
		return d.Int()
	case tagFloat:
		if len(d.B) < 8 {
			d.Fail("truncated number")
			return nil
		}
		f := math.Float64frombits(binary.LittleEndian.Uint64(d.B))
		d.B = d.B[8:]
		if math.IsNaN(f) || math.IsInf(f, 0) {
			d.Fail("number that JSON cannot hold")
			return nil
		}
		return f
	case tagString:
		return d.String()
	case tagBig:
		s := d.String()
		if b, ok := new(big.Int).SetString(s, 10); ok && !b.IsInt64() && !strings.HasPrefix(s, "+") {
			return b
		}
		d.Fail("bad big integer " + strconv.Quote(s))
		return nil
	case tagList:
		n := d.Uint()
		if n > uint64(len(d.B)) {
			d.Fail("count past the end")
			return nil
		}
		l := make([]any, n)
		for i := range l {
			l[i] = d.value(depth + 1)
		}
		return l
	case tagMap:
		n := d.Uint()
		if n > uint64(len(d.B)) {
			d.Fail("count past the end")
			return nil
		}
		m := make(map[string]any, n)
		for range n {
			k := d.String()
			m[k] = d.value(depth + 1)
		}
		return m
	case tagJSON:
		raw := d.Bytes()
		if d.Err != nil {
			return nil
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil || dec.More() {
			d.Fail(fmt.Sprintf("bad JSON value (%v)", err))
			return nil
		}
		v, err := value.Normalize(v)
		if err == nil {
			err = value.Check(v, depth)
		}
		if err != nil {
			d.Fail(err.Error())
			return nil
		}
		return v
	default:
		d.Fail(fmt.Sprintf("unknown value tag %d", tag))
		return nil
	}
}
