package workerwire

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"math/big"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/testing/wiretest"
	"github.com/airlock-sandbox/airlock/internal/value"
)

// TestRequestRoundTrip: every field of a Job survives the wire (fill sets
// them all, so a field added to Job and not to the wire fails here), and
// an empty job stays empty.
func TestRequestRoundTrip(t *testing.T) {
	var full airlock.Job
	n := 0
	wiretest.Fill(reflect.ValueOf(&full).Elem(), &n)
	full.Input = map[string]any{"i": int64(-3), "f": 2.0, "s": "é\xff", "b": true, "n": nil,
		"big": new(big.Int).Lsh(big.NewInt(1), 70), "l": []any{int64(1), []any{}, map[string]any{}}, "m": map[string]any{"k": "v"}}
	// Network rules: a scheme and paths, and paths absent, empty or set.
	rules := airlock.Job{Grants: airlock.Grants{Net: []airlock.NetRule{
		{Host: "git.example", Methods: []string{"GET"}, Scheme: "https", Paths: []string{"*/info/refs", "/org/repo/*"}},
		{Host: "git.example", Methods: []string{"POST"}, Ports: []int{8443}, Paths: []string{"*/git-upload-pack"}},
		{Host: "plain.example", Scheme: "http", Paths: []string{}},
		{Host: "any.example"},
	}}}
	for _, job := range []airlock.Job{full, {}, {Kind: airlock.KindExpr, Input: map[string]any{}, Argv: []string{}}, rules} {
		frame, err := AppendRequest([]byte("prefix"), 512, 10, &job)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(frame, []byte("prefix")) {
			t.Fatal("AppendRequest did not append")
		}
		req, err := ReadRequest(bytes.NewReader(frame[len("prefix"):]))
		if err != nil {
			t.Fatal(err)
		}
		if req.MemoryMB != 512 || req.CPUSeconds != 10 || !reflect.DeepEqual(req.Job, job) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", req.Job, job)
		}
	}
}

// TestRequestNormalizes: what the JSON wire would have made of an input
// (int as int64, json.Number as an integer, a big integer or a float), the
// binary wire makes too.
func TestRequestNormalizes(t *testing.T) {
	job := airlock.Job{Kind: airlock.KindExpr, Input: map[string]any{"a": 7, "b": json.Number("12"), "c": json.Number("1.5"),
		"d": json.Number("123456789012345678901234567890"), "e": big.NewInt(5)}}
	frame, err := AppendRequest(nil, 1, 1, &job)
	if err != nil {
		t.Fatal(err)
	}
	req, err := ReadRequest(bytes.NewReader(frame))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"a": int64(7), "b": int64(12), "c": 1.5, "e": int64(5)}
	d, _ := new(big.Int).SetString("123456789012345678901234567890", 10)
	want["d"] = d
	if !reflect.DeepEqual(req.Job.Input, want) {
		t.Fatalf("got %#v, want %#v", req.Job.Input, want)
	}
	for name, in := range map[string]any{"NaN": math.NaN(), "infinity": math.Inf(1), "channel": make(chan int), "deep": deep(value.MaxDepth + 2)} {
		if _, err := AppendRequest(nil, 1, 1, &airlock.Job{Input: map[string]any{"x": in}}); err == nil {
			t.Errorf("%s: encoded", name)
		}
	}
}

func deep(n int) any {
	var v any = int64(1)
	for range n {
		v = []any{v}
	}
	return v
}

// TestResultRoundTrip: every field of a Result but the five the host
// sets itself (tier, level, clock, seed, and the server's replica) survives, and values come back as the JSON wire gave them.
func TestResultRoundTrip(t *testing.T) {
	var full airlock.Result
	n := 0
	wiretest.Fill(reflect.ValueOf(&full).Elem(), &n)
	full.Value = map[string]any{"x": []any{int64(1), 2.5, "s", nil, false, new(big.Int).Lsh(big.NewInt(1), 80)}}
	want := full
	want.Tier, want.Level, want.Clock, want.Seed, want.Replica = "", 0, time.Time{}, 0, ""
	frame, err := AppendResult(nil, &full)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadResult(bytes.NewReader(frame), len(frame))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, want)
	}
	// A value outside the exported types goes as JSON and comes back as
	// the JSON wire would have decoded it.
	odd := airlock.Result{Value: map[string]uint16{"k": 3}}
	if frame, err = AppendResult(nil, &odd); err != nil {
		t.Fatal(err)
	}
	if got, err = ReadResult(bytes.NewReader(frame), len(frame)); err != nil || !reflect.DeepEqual(got.Value, map[string]any{"k": int64(3)}) {
		t.Fatalf("JSON-encoded value: %v %#v", err, got.Value)
	}
	// Over the limit: refused before the body is read.
	if _, err := ReadResult(bytes.NewReader(frame), len(frame)-5); err == nil || !strings.Contains(err.Error(), "over the limit") {
		t.Fatalf("over the limit: %v", err)
	}
}

// TestMalformed: every truncation of valid frames, and frames a
// compromised worker could forge, are errors (not panics, not values).
func TestMalformed(t *testing.T) {
	res := airlock.Result{Value: map[string]any{"a": []any{int64(1), "two", 3.5}}, Stdout: "out", Stopped: &airlock.Stop{Reason: airlock.StopSteps}}
	frame, err := AppendResult(nil, &res)
	if err != nil {
		t.Fatal(err)
	}
	for i := range len(frame) {
		if _, err := ReadResult(bytes.NewReader(frame[:i]), 1<<20); err == nil {
			t.Fatalf("truncated to %d of %d bytes: accepted", i, len(frame))
		}
	}
	job := airlock.Job{Kind: airlock.KindExpr, Code: "x", Input: map[string]any{"x": int64(1)}, Clock: time.Now()}
	req, err := AppendRequest(nil, 1, 1, &job)
	if err != nil {
		t.Fatal(err)
	}
	for i := range len(req) {
		if _, err := ReadRequest(bytes.NewReader(req[:i])); err == nil {
			t.Fatalf("request truncated to %d of %d bytes: accepted", i, len(req))
		}
	}
	// The rest of a result after its value: empty strings, no flags,
	// zero numbers, no image, no decision, no files, no skipped files.
	rest := []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	valueFrame := func(v ...byte) []byte { return frameOf(append(v, rest...)) }
	if r, err := ReadResult(bytes.NewReader(valueFrame(tagInt, 2)), 1<<20); err != nil || r.Value != int64(1) {
		t.Fatalf("the hand-built frame itself is wrong: %v %+v", err, r)
	}
	nan := binary.LittleEndian.AppendUint64([]byte{tagFloat}, math.Float64bits(math.NaN()))
	nest := bytes.Repeat([]byte{tagList, 1}, value.MaxDepth+2)
	for name, f := range map[string][]byte{
		"NaN":              valueFrame(nan...),
		"unknown tag":      valueFrame(200),
		"list count":       valueFrame(tagList, 0xff, 0xff, 0xff, 0x7f),
		"map count":        valueFrame(tagMap, 0xff, 0xff, 0x03),
		"string length":    valueFrame(tagString, 0xff, 0x7f),
		"nested too deep":  valueFrame(append(nest, tagNil)...),
		"small big":        valueFrame(append([]byte{tagBig, 1}, '5')...),
		"bad big":          valueFrame(append([]byte{tagBig, 2}, "1x"...)...),
		"bad JSON":         valueFrame(append([]byte{tagJSON, 1}, '{')...),
		"JSON NaN-ish":     valueFrame(append([]byte{tagJSON, 5}, "1e999"...)...),
		"flag not 0 or 1":  frameOf([]byte{tagNil, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}),
		"trailing bytes":   frameOf(append(append([]byte{tagNil}, rest...), 0)),
		"overlong varint":  valueFrame(append([]byte{tagInt}, bytes.Repeat([]byte{0xff}, 11)...)...),
		"frame over limit": {0xff, 0xff, 0xff, 0xff},
	} {
		if r, err := ReadResult(bytes.NewReader(f), 1<<20); err == nil {
			t.Errorf("%s: accepted as %+v", name, r)
		}
	}
	for name, f := range map[string][]byte{
		"negative memory": func() []byte {
			ok, _ := AppendRequest(nil, 1, 1, &airlock.Job{})
			b := append([]byte(nil), ok[4:]...)
			b[0] = 1 // zig-zag -1
			return frameOf(b)
		}(),
		"input not a map": func() []byte {
			ok, _ := AppendRequest(nil, 1, 1, &airlock.Job{})
			b := append([]byte(nil), ok[4:]...)
			b[2+6] = tagTrue // after memory, CPU and six empty fields: the input's tag
			return frameOf(b)
		}(),
	} {
		if _, err := ReadRequest(bytes.NewReader(f)); err == nil {
			t.Errorf("request %s: accepted", name)
		}
	}
}

func frameOf(body []byte) []byte {
	return append(binary.LittleEndian.AppendUint32(nil, uint32(len(body))), body...)
}

// FuzzReadResult: no input makes the host's decoder panic, and what it
// accepts is a JSON-compatible value.
func FuzzReadResult(f *testing.F) {
	res := airlock.Result{Value: []any{int64(1), "x", map[string]any{"k": 1.5}}, Error: &airlock.ErrorInfo{Kind: airlock.ErrRuntime, Message: "m"}}
	frame, _ := AppendResult(nil, &res)
	f.Add(frame[4:])
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := decodeResult(body)
		if err == nil {
			if err := value.Check(r.Value, 0); err != nil {
				t.Fatalf("accepted a value that is not JSON-compatible: %v", err)
			}
		}
	})
}
