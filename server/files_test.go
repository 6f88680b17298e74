package server_test

import (
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
)

// TestRunFilesOverAPI: POST /v1/run takes a binary file as {"base64": ...}
// and answers with the program's binary stdout and the collected files
// in the same form; a malformed file value is a 400 naming "files".
func TestRunFilesOverAPI(t *testing.T) {
	f := newFixture(t)
	r := f.do("POST", "/v1/run", keyA, `{"kind":"command","argv":["sh","-c","cat in.bin; cp in.bin out.bin; echo t > out.txt"],`+
		`"files":{"in.bin":{"base64":"AP8B"}},"collect":["out.*","gone"]}`)
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
