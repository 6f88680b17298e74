package approve_test

import (
	"encoding/json"
	"testing"

	"github.com/airlock-sandbox/airlock/approve"
)

// TestOfToolCall: the digest binds the server, the tool and the arguments,
// whatever their spelling.
func TestOfToolCall(t *testing.T) {
	argv := []string{"node", "server.js"}
	d := func(argv []string, tool, args string) approve.Digest {
		t.Helper()
		got, err := approve.OfToolCall(argv, tool, json.RawMessage(args))
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	base := d(argv, "write", `{"path":"a","n":1}`)
	if d(argv, "write", "{ \"n\": 1,\n \"path\": \"a\" }") != base {
		t.Error("the same arguments spelt otherwise digest differently")
	}
	for _, other := range []approve.Digest{d(argv, "write", `{"path":"b","n":1}`), d(argv, "write", `{"path":"a","n":1.0}`), d(argv, "read", `{"path":"a","n":1}`), d([]string{"node", "other.js"}, "write", `{"path":"a","n":1}`)} {
		if other == base {
			t.Error("a different call has the same digest")
		}
	}
	if d(argv, "t", "") != d(argv, "t", "{}") || d(argv, "t", "null") != d(argv, "t", "{}") {
		t.Error("absent arguments are not {}")
	}
	if _, err := approve.OfToolCall(argv, "t", json.RawMessage(`{} {}`)); err == nil {
		t.Error("two values accepted")
	}
}
