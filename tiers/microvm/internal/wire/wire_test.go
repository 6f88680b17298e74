package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	big := strings.Repeat("x", MaxChunk*2+10)
	if _, err := (ChunkWriter{W: &buf, T: TypeStdout}).Write([]byte(big)); err != nil {
		t.Fatal(err)
	}
	if err := WriteJSON(&buf, TypeExit, Exit{Code: 3}); err != nil {
		t.Fatal(err)
	}
	var got []byte
	chunks := 0
	for {
		typ, p, err := Read(&buf)
		if err != nil {
			t.Fatal(err)
		}
		if typ == TypeExit {
			if string(p) != `{"code":3}` {
				t.Fatalf("exit payload %q", p)
			}
			break
		}
		if typ != TypeStdout || len(p) > MaxChunk {
			t.Fatalf("frame %q of %d bytes", typ, len(p))
		}
		chunks++
		got = append(got, p...)
	}
	if string(got) != big || chunks != 3 {
		t.Fatalf("got %d bytes in %d chunks", len(got), chunks)
	}
}

func frameHeader(t Type, n uint32) []byte {
	h := []byte{byte(t), 0, 0, 0, 0}
	binary.BigEndian.PutUint32(h[1:], n)
	return h
}

func TestReadRefusesHostileFrames(t *testing.T) {
	cases := map[string]struct {
		in   []byte
		want error
	}{
		// A guest announcing a 4 GiB chunk must not make the host allocate it.
		"oversized chunk": {frameHeader(TypeStdout, 1<<32-1), ErrTooLarge},
		"oversized exit":  {frameHeader(TypeExit, MaxSmall+1), ErrTooLarge},
		"truncated":       {append(frameHeader(TypeStdout, 10), "abc"...), io.ErrUnexpectedEOF},
		"short header":    {[]byte{'O', 0}, io.ErrUnexpectedEOF},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, _, err := Read(bytes.NewReader(c.in))
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
		})
	}
	if _, _, err := Read(bytes.NewReader(frameHeader('Z', 0))); err == nil || !strings.Contains(err.Error(), "unknown frame type") {
		t.Fatalf("unknown type: %v", err)
	}
	if err := Write(io.Discard, TypeExit, make([]byte, MaxSmall+1)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Write of an oversized frame: %v", err)
	}
}

// FuzzRead checks that no input makes Read panic or return a payload above
// its type's bound.
func FuzzRead(f *testing.F) {
	f.Add(append(frameHeader(TypeStdout, 3), "abc"...))
	f.Add(frameHeader(TypeJob, MaxJob+1))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		for {
			typ, p, err := Read(r)
			if err != nil {
				return
			}
			max, _ := limit(typ)
			if len(p) > max {
				t.Fatalf("%q frame of %d bytes passed", typ, len(p))
			}
		}
	})
}
