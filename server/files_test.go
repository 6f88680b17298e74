package server_test

import (
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
	"github.com/airlock-sandbox/airlock/server"
)

// TestRunFilesOverAPI: POST /v1/run takes a binary file as {"base64": ...}
// and answers with the program's binary stdout and the collected files
// in the same form; a malformed file value is a 400 naming "files".
func TestRunFilesOverAPI(t *testing.T) {
	f := newFixture(t)
	r := f.do("POST", "/v1/run", keyA, `{"kind":"command","argv":["sh","-c","cat in.bin; cp in.bin out.bin; echo t > out.txt"],`+
		`"files":{"in.bin":{"base64":"AP8B"}},"collect":["out.*","gone"],"grants":{"spawn":true}}`)
	if r.status == 422 || r.status == 503 || strings.Contains(string(r.body), "not_admitted") {
		testenv.Skipf(t, "no command tier here: %s", r.body)
	}
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	for _, want := range []string{`"stdout":{"base64":"AP8B"}`, `"out.bin":{"base64":"AP8B"}`, `"out.txt":"t\n"`, `"files_skipped":["gone: matched nothing"]`} {
		if !strings.Contains(string(r.body), want) {
			t.Errorf("result lacks %s: %s", want, r.body)
		}
	}
	res := r.result(t)
	if res.Stdout != "\x00\xff\x01" || res.Files["out.bin"] != "\x00\xff\x01" {
		t.Errorf("decoded %q %q", res.Stdout, res.Files)
	}
	for _, bad := range []string{`{"base64":"!"}`, `{"base64":"AA==","x":1}`, `7`} {
		r := f.do("POST", "/v1/run", keyA, `{"kind":"command","argv":["true"],"files":{"f":`+bad+`}}`)
		if r.status != 400 || !strings.Contains(string(r.body), "files") {
			t.Errorf("file %s: status %d: %s", bad, r.status, r.body)
		}
	}
}

// TestOutputDigestCoversFiles: collected files are output a replay
// compares; a result without files keeps its digest.
func TestOutputDigestCoversFiles(t *testing.T) {
	base := airlock.Result{Stdout: "out", ExitCode: 0}
	d0 := server.OutputDigest(&base)
	a, b := base, base
	a.Files, b.Files = map[string]string{"f": "\x00\x01"}, map[string]string{"f": "\x00\x02"}
	if server.OutputDigest(&a) == d0 || server.OutputDigest(&a) == server.OutputDigest(&b) {
		t.Error("collected files do not change the output digest")
	}
	// Pinned: the trail's existing records must still replay.
	if want := "7a021a859ff2c5c142d9a78b368554c4a47ba4fc90e42ac43ace697f6806c27b"; d0 != want {
		t.Errorf("the digest of a result without files changed: %s, was %s", d0, want)
	}
}
