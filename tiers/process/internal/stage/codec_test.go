package stage

import (
	"bytes"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testing/wiretest"
	"github.com/airlock-sandbox/airlock/tiers/process/internal/wire"
)

// TestCodecRoundTrip: every field of every message survives its wire form
// (Fill sets them all, so a field added to a message and not to its codec
// fails here), and so does the zero message.
func TestCodecRoundTrip(t *testing.T) {
	check := func(name string, full, zero any, roundTrip func(any) (any, error)) {
		t.Helper()
		n := 0
		v := reflect.New(reflect.TypeOf(full)).Elem()
		wiretest.Fill(v, &n)
		for _, in := range []any{v.Interface(), zero} {
			out, err := roundTrip(in)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if !reflect.DeepEqual(out, in) {
				t.Fatalf("%s round trip:\n got %+v\nwant %+v", name, out, in)
			}
		}
	}
	check("base spec", BaseSpec{}, BaseSpec{}, func(v any) (any, error) {
		b := v.(BaseSpec)
		f, err := AppendBase(nil, &b)
		if err != nil {
			return nil, err
		}
		return specPipe{bytes.NewReader(f)}.base()
	})
	check("job spec", JobSpec{}, JobSpec{}, func(v any) (any, error) {
		j := v.(JobSpec)
		f, err := AppendJob(nil, &j)
		if err != nil {
			return nil, err
		}
		return specPipe{bytes.NewReader(f)}.job()
	})
	check("status", Status{}, Status{}, func(v any) (any, error) {
		st := v.(Status)
		return ReadStatus(bytes.NewReader(AppendStatus(nil, &st)))
	})
	check("spawn request", SpawnRequest{}, SpawnRequest{}, func(v any) (any, error) {
		r := v.(SpawnRequest)
		return DecodeSpawnRequest(AppendSpawnRequest(nil, &r))
	})
	check("spawn message", SpawnMessage{}, SpawnMessage{}, func(v any) (any, error) {
		m := v.(SpawnMessage)
		return DecodeSpawnMessage(AppendSpawnMessage(nil, &m))
	})
	// The go-ahead is a frame of its own, and after it the stream ends.
	p := specPipe{bytes.NewReader(AppendGo(nil))}
	if err := p.next(); err != nil {
		t.Fatalf("go-ahead: %v", err)
	}
	if err := p.next(); err != io.EOF {
		t.Fatalf("after the go-ahead: %v, want EOF", err)
	}
}

// TestStatusUntrusted: the parent reads status frames from inside the
// sandbox: every truncation, an oversized frame, unknown flags and
// trailing bytes are errors; an over-long error message is cut to fit.
func TestStatusUntrusted(t *testing.T) {
	st := Status{Exited: true, Code: 3, Signal: 9, Error: "boom"}
	f := AppendStatus(nil, &st)
	for i := range len(f) {
		if _, err := ReadStatus(bytes.NewReader(f[:i])); err == nil {
			t.Fatalf("truncated to %d of %d bytes: accepted", i, len(f))
		}
	}
	bad := append([]byte(nil), f...)
	bad[4] = 0xf0 // flags
	if _, err := ReadStatus(bytes.NewReader(bad)); err == nil {
		t.Fatal("unknown flags accepted")
	}
	long := append([]byte(nil), f...)
	long = append(long, 0)
	long[0]++ // the frame claims the extra byte
	if _, err := ReadStatus(bytes.NewReader(long)); err == nil || !strings.Contains(err.Error(), "trailing") {
		t.Fatalf("trailing bytes: %v", err)
	}
	if _, err := ReadStatus(bytes.NewReader([]byte{0xff, 0xff, 0xff, 0x7f})); err == nil || !strings.Contains(err.Error(), "over the limit") {
		t.Fatalf("huge frame: %v", err)
	}
	big := Status{Error: strings.Repeat("x", 2*StatusLimit)}
	got, err := ReadStatus(bytes.NewReader(AppendStatus(nil, &big)))
	if err != nil || len(got.Error) == 0 || len(got.Error) >= StatusLimit {
		t.Fatalf("long error: %v, %d bytes", err, len(got.Error))
	}
}

// FuzzReadStatus: no input panics the parent's status reader.
func FuzzReadStatus(f *testing.F) {
	f.Add(AppendStatus(nil, &Status{Ready: true}))
	f.Add(AppendStatus(nil, &Status{Exited: true, Code: 1, Error: "e"}))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = ReadStatus(bytes.NewReader(data))
	})
}

// TestSpawnRequestUID: a uid beyond 32 bits is refused, not truncated to
// another user's id.
func TestSpawnRequestUID(t *testing.T) {
	msg := wire.Strings(wire.String(nil, "/stage"), []string{"stage"})
	msg = wire.String(wire.Strings(msg, nil), "/")
	msg = wire.Bool(wire.Uint(wire.Uint(msg, 0), 1<<32+1000), false)
	if r, err := DecodeSpawnRequest(msg); err == nil {
		t.Fatalf("uid 2^32+1000 accepted as %d", r.UID)
	}
}

// TestGrantRule pins which binds get a Landlock read rule of their own:
// a grant of a fixed path (/ above all) must not widen what the fixed
// rules allow.
func TestGrantRule(t *testing.T) {
	for target, want := range map[string]bool{
		"/": false, "/usr": false, "/usr/share": false, "/etc": false, "/etc/ssl": false,
		"/dev": false, "/dev/shm": false, "/proc": false, "/proc/1": false, "/scratch": false, "/tmp": false,
		"/data": true, "/opt/tools": true, "/srv/x/y": true, "/usrx": true, "/etcetera": true,
	} {
		if got := grantRule(target, false); got != want {
			t.Errorf("grantRule(%q) = %v, want %v", target, got, want)
		}
		// An image's /usr is not the host's: a grant there is bound and
		// gets its rule.
		imageWant := want || target == "/usr" || target == "/usr/share"
		if got := grantRule(target, true); got != imageWant {
			t.Errorf("grantRule(%q) with an image = %v, want %v", target, got, imageWant)
		}
	}
}
