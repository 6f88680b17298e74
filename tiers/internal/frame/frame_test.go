package frame

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	big := strings.Repeat("x", MaxChunk*2+10)
	if _, err := (ChunkWriter{W: &buf, T: Stdout}).Write([]byte(big)); err != nil {
		t.Fatal(err)
	}
	if err := Write(&buf, Stderr, nil); err != nil {
		t.Fatal(err)
	}
	if err := WriteJSON(&buf, Exit, struct {
		Code int `json:"code"`
	}{3}); err != nil {
		t.Fatal(err)
	}
	var got []byte
	chunks := 0
	for {
		typ, p, err := Read(&buf)
		if err != nil {
			t.Fatal(err)
		}
		if typ == Exit {
			if string(p) != `{"code":3}` {
				t.Fatalf("exit payload %q", p)
			}
			break
		}
		if typ == Stderr {
			if len(p) != 0 {
				t.Fatalf("empty stderr frame read as %q", p)
			}
			continue
		}
		if typ != Stdout || len(p) > MaxChunk {
			t.Fatalf("frame %q of %d bytes", typ, len(p))
		}
		chunks++
		got = append(got, p...)
	}
	if string(got) != big || chunks != 3 {
		t.Fatalf("got %d bytes in %d chunks", len(got), chunks)
	}
	if _, _, err := Read(&buf); err != io.EOF {
		t.Fatalf("want EOF at a frame boundary, got %v", err)
	}
}

// TestJobAtItsBound: a job frame of exactly MaxJob bytes, larger than the
// first buffer Read allocates, arrives whole.
func TestJobAtItsBound(t *testing.T) {
	payload := bytes.Repeat([]byte("0123456789abcdef"), MaxJob/16)
	var buf bytes.Buffer
	if err := Write(&buf, Job, payload); err != nil {
		t.Fatal(err)
	}
	typ, p, err := Read(&buf)
	if err != nil || typ != Job || !bytes.Equal(p, payload) {
		t.Fatalf("got %c, %d bytes, %v", typ, len(p), err)
	}
	if err := Write(io.Discard, Job, append(payload, 0)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Write of a job above MaxJob: %v", err)
	}
}

func header(t Type, n uint32) []byte {
	h := []byte{byte(t), 0, 0, 0, 0}
	binary.BigEndian.PutUint32(h[1:], n)
	return h
}

// allocated returns the bytes f allocates.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestReadRefusesHostileFrames: a frame above its type's bound or of an
// unknown type is refused from its header, and a truncated one after
// allocating about what did arrive, not what the header announced.
func TestReadRefusesHostileFrames(t *testing.T) {
	cases := map[string]struct {
		in   []byte
		want error
	}{
		"oversized chunk": {header(Stdout, 1<<32-1), ErrTooLarge},
		"oversized exit":  {header(Exit, MaxSmall+1), ErrTooLarge},
		"oversized job":   {header(Job, MaxJob+1), ErrTooLarge},
		"unknown type":    {header('Z', 0), ErrUnknownType},
		"truncated":       {append(header(Stdout, 10), "abc"...), io.ErrUnexpectedEOF},
		"truncated job":   {append(header(Job, MaxJob), "{}"...), io.ErrUnexpectedEOF},
		"short header":    {[]byte{'O', 0}, io.ErrUnexpectedEOF},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			var err error
			n := allocated(func() { _, _, err = Read(bytes.NewReader(c.in)) })
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
			if n > 2*MaxChunk {
				t.Errorf("%d bytes allocated before refusing", n)
			}
		})
	}
	if err := Write(io.Discard, Exit, make([]byte, MaxSmall+1)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Write of an oversized frame: %v", err)
	}
	if err := Write(io.Discard, 'Z', nil); !errors.Is(err, ErrUnknownType) {
		t.Fatalf("Write of an unknown type: %v", err)
	}
}

// FuzzRead reads frames from arbitrary bytes. Read must never panic,
// never return a payload above its type's bound, allocate no more than a
// small multiple of what it was given, and each frame it accepts must
// write back as exactly the bytes it was read from. The input is also
// written as one frame (its first byte the type) and read back.
func FuzzRead(f *testing.F) {
	f.Add(append(header(Stdout, 3), "abc"...))
	f.Add(append(header(Exit, 2), "{}"...))
	f.Add(append(append(header(Ready, 0), header(Stderr, 1)...), 'x'))
	f.Add(header(Job, MaxJob))
	f.Add(header(Job, MaxJob+1))
	f.Add(header(Fail, 1<<32-1))
	f.Add([]byte{'Z'})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		var n uint64
		var frames [][]byte
		var types []Type
		n = allocated(func() {
			for range 64 {
				typ, p, err := Read(r)
				if err != nil {
					return
				}
				types = append(types, typ)
				frames = append(frames, p)
			}
		})
		// The slack covers the fuzzing machinery's own allocations, which
		// TotalAlloc counts too; a header believed would cost MaxJob.
		if n > 4*uint64(len(data))+1<<20 {
			t.Fatalf("%d bytes allocated reading %d", n, len(data))
		}
		var back bytes.Buffer
		for i, p := range frames {
			if max, ok := Limit(types[i]); !ok || len(p) > max {
				t.Fatalf("accepted %q frame of %d bytes", types[i], len(p))
			}
			if err := Write(&back, types[i], p); err != nil {
				t.Fatalf("writing back an accepted frame: %v", err)
			}
		}
		if !bytes.HasPrefix(data, back.Bytes()) {
			t.Fatalf("frames written back differ from the input")
		}

		if len(data) == 0 {
			return
		}
		back.Reset()
		typ, payload := Type(data[0]), data[1:]
		err := Write(&back, typ, payload)
		if _, ok := Limit(typ); !ok || len(payload) > MaxSmall && typ != Stdout && typ != Stderr && typ != Job {
			if err == nil {
				t.Fatalf("wrote a %q frame of %d bytes", typ, len(payload))
			}
			return
		}
		if err != nil {
			return // above a chunk's bound
		}
		got, p, err := Read(&back)
		if err != nil || got != typ || !bytes.Equal(p, payload) {
			t.Fatalf("round trip of a %q frame: got %q, %d bytes, %v", typ, got, len(p), err)
		}
	})
}

// TestReadAllowedRefusesFromHeader: a type the reader does not take is
// refused after its header, none of its payload read; the types it takes
// are read as Read reads them.
func TestReadAllowedRefusesFromHeader(t *testing.T) {
	var buf bytes.Buffer
	if err := Write(&buf, Stdout, []byte("out")); err != nil {
		t.Fatal(err)
	}
	if err := Write(&buf, Job, bytes.Repeat([]byte("j"), 1<<20)); err != nil {
		t.Fatal(err)
	}
	noJob := func(t Type) bool { return t != Job }
	typ, p, err := ReadAllowed(&buf, noJob)
	if err != nil || typ != Stdout || string(p) != "out" {
		t.Fatalf("an allowed frame: %c %q %v", typ, p, err)
	}
	_, _, err = ReadAllowed(&buf, noJob)
	if !errors.Is(err, ErrUnexpected) {
		t.Fatalf("a refused type: %v", err)
	}
	if buf.Len() != 1<<20 {
		t.Errorf("%d bytes of the refused frame's payload were read", 1<<20-buf.Len())
	}
}
