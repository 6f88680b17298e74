package stage

import (
	"fmt"
	"io"
	"os"

	"github.com/airlock-sandbox/airlock/tiers/process/internal/wire"
)

// The messages between the parent, the stage and the spawner travel in the
// wire package's binary form: a stage decodes its base spec in a process
// that has just started, where encoding/json's reflection (building its
// per-type tables, base64 for the seccomp program) cost about 0.3 ms of a
// cold start, and the stage binary no longer links it.

const (
	// specLimit bounds a frame from the parent (a job spec carries the
	// job's files).
	specLimit = 1 << 30
	// StatusLimit bounds a status frame, which the parent reads from
	// inside the sandbox.
	StatusLimit = 64 << 10
)

// AppendBase appends a base spec frame.
func AppendBase(dst []byte, b *BaseSpec) ([]byte, error) {
	dst, start := wire.Begin(dst)
	dst = wire.Count(dst, b.Binds == nil, len(b.Binds))
	for _, bd := range b.Binds {
		dst = wire.String(dst, bd.Target)
		dst = wire.Int(dst, int64(bd.Fd))
		dst = wire.Bool(dst, bd.Dir)
		dst = wire.Bool(dst, bd.Placed)
		dst = wire.Bool(dst, bd.Copy)
	}
	dst = wire.Bool(dst, b.HasScratch)
	dst = wire.Int(dst, b.ScratchMB)
	dst = wire.Bool(dst, b.Egress)
	dst = wire.Int(dst, int64(b.ForwarderFd))
	dst = wire.Int(dst, int64(b.EtcFd))
	dst = wire.Int(dst, int64(b.RootFd))
	dst = wire.Bytes(dst, b.Seccomp)
	dst = wire.Bytes(dst, b.SeccompNoExec)
	dst = appendFds(dst, b.CgroupFds)
	return wire.End(dst, start, specLimit)
}

func appendFds(dst []byte, fds []int) []byte {
	dst = wire.Count(dst, fds == nil, len(fds))
	for _, fd := range fds {
		dst = wire.Int(dst, int64(fd))
	}
	return dst
}

func decodeFds(d *wire.Decoder) []int {
	n, ok := d.Count()
	if !ok {
		return nil
	}
	fds := make([]int, n)
	for i := range fds {
		fds[i] = int(d.Int())
	}
	return fds
}

func decodeBase(data []byte) (BaseSpec, error) {
	d := wire.Decoder{B: data}
	var b BaseSpec
	if n, ok := d.Count(); ok {
		b.Binds = make([]BindSpec, n)
		for i := range b.Binds {
			b.Binds[i] = BindSpec{Target: d.String(), Fd: int(d.Int()), Dir: d.Bool(), Placed: d.Bool(), Copy: d.Bool()}
		}
	}
	b.HasScratch = d.Bool()
	b.ScratchMB = d.Int()
	b.Egress = d.Bool()
	b.ForwarderFd = int(d.Int())
	b.EtcFd = int(d.Int())
	b.RootFd = int(d.Int())
	if s := d.Bytes(); len(s) > 0 {
		b.Seccomp = s
	}
	if s := d.Bytes(); len(s) > 0 {
		b.SeccompNoExec = s
	}
	b.CgroupFds = decodeFds(&d)
	return b, d.Done()
}

// AppendJob appends a job spec frame.
func AppendJob(dst []byte, j *JobSpec) ([]byte, error) {
	dst, start := wire.Begin(dst)
	dst = wire.Strings(dst, j.Argv)
	dst = wire.Strings(dst, j.Env)
	dst = wire.StringMap(dst, j.Files)
	dst = wire.Bool(dst, j.Stdin)
	dst = wire.Int(dst, j.ScratchMB)
	dst = wire.Count(dst, j.Rlimits == nil, len(j.Rlimits))
	for _, r := range j.Rlimits {
		dst = wire.Int(dst, int64(r.Resource))
		dst = wire.Uint(dst, r.Cur)
		dst = wire.Uint(dst, r.Max)
	}
	dst = wire.Strings(dst, j.ReadPaths)
	dst = wire.String(dst, j.Scratch)
	dst = wire.Uint(dst, uint64(j.UID))
	dst = wire.Bytes(dst, j.Seccomp)
	dst = wire.Bool(dst, j.Egress)
	dst = wire.Bool(dst, j.NoExec)
	dst = wire.Bool(dst, j.Go)
	dst = appendFds(dst, j.CgroupFds)
	return wire.End(dst, start, specLimit)
}

func decodeJob(data []byte) (JobSpec, error) {
	d := wire.Decoder{B: data}
	var j JobSpec
	j.Argv, j.Env, j.Files = d.Strings(), d.Strings(), d.StringMap()
	j.Stdin = d.Bool()
	j.ScratchMB = d.Int()
	if n, ok := d.Count(); ok {
		j.Rlimits = make([]Rlimit, n)
		for i := range j.Rlimits {
			j.Rlimits[i] = Rlimit{Resource: int(d.Int()), Cur: d.Uint(), Max: d.Uint()}
		}
	}
	j.ReadPaths = d.Strings()
	j.Scratch = d.String()
	j.UID = d.Uint32()
	if s := d.Bytes(); len(s) > 0 {
		j.Seccomp = s
	}
	j.Egress = d.Bool()
	j.NoExec = d.Bool()
	j.Go = d.Bool()
	j.CgroupFds = decodeFds(&d)
	return j, d.Done()
}

// AppendGo appends the go-ahead after the files were placed (an empty
// frame).
func AppendGo(dst []byte) []byte {
	dst, start := wire.Begin(dst)
	dst, _ = wire.End(dst, start, 0)
	return dst
}

// AppendStatus appends a status frame.
func AppendStatus(dst []byte, st *Status) []byte {
	dst, start := wire.Begin(dst)
	var flags byte
	for i, f := range [...]bool{st.Ready, st.Placed, st.Exited, st.NotFound, st.NoExec} {
		if f {
			flags |= 1 << i
		}
	}
	dst = append(dst, flags)
	dst = wire.Int(dst, int64(st.Code))
	dst = wire.Int(dst, int64(st.Signal))
	msg := st.Error
	if len(msg) > StatusLimit-64 {
		msg = msg[:StatusLimit-64]
	}
	dst = wire.String(dst, msg)
	field := st.Field
	if len(field) > 32 {
		field = field[:32]
	}
	dst = wire.String(dst, field)
	dst, _ = wire.End(dst, start, StatusLimit)
	return dst
}

// ReadStatus reads one status frame. It comes from inside the sandbox, so
// it is bounded and checked.
func ReadStatus(r io.Reader) (Status, error) {
	data, err := wire.ReadFrame(r, StatusLimit)
	if err != nil {
		return Status{}, err
	}
	d := wire.Decoder{B: data}
	flags := d.Byte()
	if flags >= 1<<5 {
		d.Fail("unknown status flags")
	}
	st := Status{Ready: flags&1 != 0, Placed: flags&2 != 0, Exited: flags&4 != 0, NotFound: flags&8 != 0, NoExec: flags&16 != 0}
	st.Code, st.Signal = int(int32(d.Int())), int(int32(d.Int()))
	st.Error = d.String()
	st.Field = d.String()
	if err := d.Done(); err != nil {
		return Status{}, fmt.Errorf("malformed status: %w", err)
	}
	return st, nil
}

// AppendSpawnRequest appends a spawn request (a whole message: the socket
// keeps message boundaries).
func AppendSpawnRequest(dst []byte, r *SpawnRequest) []byte {
	dst = wire.String(dst, r.Path)
	dst = wire.Strings(dst, r.Args)
	dst = wire.Strings(dst, r.Env)
	dst = wire.String(dst, r.Dir)
	dst = wire.Uint(dst, uint64(r.Cloneflags))
	dst = wire.Uint(dst, uint64(r.UID))
	dst = wire.Bool(dst, r.SpareNet)
	return wire.Bool(dst, r.IntoCgroup)
}

// DecodeSpawnRequest decodes a spawn request.
func DecodeSpawnRequest(msg []byte) (SpawnRequest, error) {
	d := wire.Decoder{B: msg}
	r := SpawnRequest{Path: d.String(), Args: d.Strings(), Env: d.Strings(), Dir: d.String(), Cloneflags: uintptr(d.Uint())}
	r.UID = d.Uint32()
	r.SpareNet = d.Bool()
	r.IntoCgroup = d.Bool()
	return r, d.Done()
}

// AppendSpawnMessage appends a spawner message.
func AppendSpawnMessage(dst []byte, m *SpawnMessage) []byte {
	dst = wire.Int(dst, int64(m.Pid))
	dst = wire.String(dst, m.Error)
	dst = wire.Int(dst, int64(m.Exited))
	dst = wire.Int(dst, int64(m.Status))
	return wire.Bool(dst, m.SpareNet)
}

// DecodeSpawnMessage decodes a spawner message.
func DecodeSpawnMessage(msg []byte) (SpawnMessage, error) {
	d := wire.Decoder{B: msg}
	m := SpawnMessage{Pid: int(d.Int()), Error: d.String(), Exited: int(d.Int()), Status: int(d.Int()), SpareNet: d.Bool()}
	return m, d.Done()
}

// specPipe reads the parent's frames on FdSpec.
type specPipe struct{ r io.Reader }

func (p specPipe) base() (BaseSpec, error) {
	data, err := wire.ReadFrame(p.r, specLimit)
	if err != nil {
		return BaseSpec{}, err
	}
	return decodeBase(data)
}

func (p specPipe) job() (JobSpec, error) {
	data, err := wire.ReadFrame(p.r, specLimit)
	if err != nil {
		return JobSpec{}, err
	}
	return decodeJob(data)
}

// next reads the next frame whatever it is (the go-ahead), or the end.
func (p specPipe) next() error {
	_, err := wire.ReadFrame(p.r, specLimit)
	return err
}

// statusPipe writes status frames on FdStatus, each in one write.
type statusPipe struct{ f *os.File }

func (p statusPipe) send(st Status) error {
	_, err := p.f.Write(AppendStatus(nil, &st))
	return err
}
