package server

import (
	"testing"

	"github.com/airlock-sandbox/airlock"
)

// A character split between two chunks is sent whole, as a string; bytes
// that are not UTF-8 go as base64.
func TestStreamLines(t *testing.T) {
	st := &stream{}
	var b []byte
	b = st.appendOutput(b, airlock.Stdout, []byte("caf\xc3"), false)
	b = st.appendOutput(b, airlock.Stdout, []byte("\xa9\n"), false)
	b = st.appendOutput(b, airlock.Stderr, []byte{0xff, 0xfe}, true)
	want := `{"stdout":"caf"}` + "\n" + `{"stdout":"é\n"}` + "\n" + `{"stderr":{"base64":"//4="}}` + "\n"
	if string(b) != want {
		t.Fatalf("got %q, want %q", b, want)
	}
	st = &stream{sse: true}
	b = st.appendError(st.appendOutput(nil, airlock.Stdout, []byte("hi\n"), true), "audit_unavailable", "x")
	want = "event: stdout\ndata: \"hi\\n\"\n\nevent: error\ndata: {\"kind\":\"audit_unavailable\",\"message\":\"x\"}\n\n"
	if string(b) != want {
		t.Fatalf("got %q, want %q", b, want)
	}
}
