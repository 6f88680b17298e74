package gvisor

import (
	"bytes"
	"encoding/binary"
	"io"
	"runtime"
	"testing"
)

func TestFrameRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	if err := writeFrame(&buf, frameStdout, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if err := writeJSONFrame(&buf, frameExit, agentExit{Code: 3}); err != nil {
		t.Fatal(err)
	}
	typ, p, err := readFrame(&buf)
	if err != nil || typ != frameStdout || string(p) != "hello" {
		t.Fatalf("got %c %q %v", typ, p, err)
	}
	typ, p, err = readFrame(&buf)
	if err != nil || typ != frameExit || !bytes.Contains(p, []byte(`"code":3`)) {
		t.Fatalf("got %c %q %v", typ, p, err)
	}
	if _, _, err := readFrame(&buf); err != io.EOF {
		t.Fatalf("want EOF at the end, got %v", err)
	}
}

// TestFrameBounds: a frame announcing more than its type allows, or of an
// unknown type, is refused from its header, before anything is allocated.
func TestFrameBounds(t *testing.T) {
	hdr := func(typ byte, n uint32) []byte {
		b := []byte{typ, 0, 0, 0, 0}
		binary.BigEndian.PutUint32(b[1:], n)
		return b
	}
	for _, c := range []struct {
		name string
		data []byte
	}{
		{"oversized chunk", hdr(frameStdout, maxChunk+1)},
		{"oversized exit", hdr(frameExit, maxExit+1)},
		{"oversized job", hdr(frameJob, 1<<31)},
		{"unknown type", hdr('Z', 1)},
		{"truncated payload", append(hdr(frameStderr, 10), "abc"...)},
	} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, _, err := readFrame(bytes.NewReader(c.data))
		runtime.ReadMemStats(&after)
		if err == nil {
			t.Errorf("%s: accepted", c.name)
		}
		if n := after.TotalAlloc - before.TotalAlloc; n > 64<<10 {
			t.Errorf("%s: %d bytes allocated before refusing", c.name, n)
		}
	}
	if err := writeJSONFrame(io.Discard, frameExit, agentExit{Error: string(make([]byte, maxExit))}); err == nil {
		t.Error("an oversized exit frame was written")
	}
}

func FuzzReadFrame(f *testing.F) {
	f.Add([]byte{frameStdout, 0, 0, 0, 2, 'h', 'i'})
	f.Add([]byte{frameExit, 0, 0, 0, 2, '{', '}'})
	f.Add([]byte{frameJob, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		for range 16 {
			typ, p, err := readFrame(r)
			if err != nil {
				return
			}
			if limit, ok := frameLimit(typ); !ok || len(p) > limit {
				t.Fatalf("accepted frame %c of %d bytes", typ, len(p))
			}
		}
	})
}
