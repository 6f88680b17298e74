package egress_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// TestRecordsPrintable: what a request puts into a decision record (a
// path decoded from %0A or %E2%80%AE, a CONNECT authority with a bidi
// override, a header line quoted in a malformed request's reason) is
// written with its control, format and line-separator characters and
// invalid UTF-8 escaped, so a job cannot forge or hide a line of the
// operator's log or of its Result.Decision, nor send a terminal escape
// through them; and what it escapes stays in the record.
func TestRecordsPrintable(t *testing.T) {
	env := newTestEnv(t, nil)
	hp := "origin.test:" + env.HTTPPort
	forged := "%0Aegress%20allow%20http%20POST%20evil.test:80/x%0D%1B%5B2K%E2%80%AE%C2%9B%E2%80%A8%FF"
	for _, raw := range []string{
		"GET http://" + hp + "/a" + forged + " HTTP/1.1\r\nHost: " + hp + "\r\n\r\n",
		"GET http://evil.test:" + env.HTTPPort + "/b" + forged + " HTTP/1.1\r\nHost: evil.test:" + env.HTTPPort + "\r\n\r\n",
		"CONNECT ev\u202eil\u0085.test:443 HTTP/1.1\r\n\r\n",
		"GET http://" + hp + "/c HTTP/1.1\r\nHost: " + hp + "\r\n\x1b[2K\u202eegress allow\r\n\r\n",
	} {
		resp, err := env.Raw("", raw)
		if err == nil {
			resp.Body.Close()
		}
	}
	r, _ := http.NewRequest("GET", "http://"+hp+"/d"+forged, nil)
	if resp, err := env.GW.RoundTrip(r); err == nil {
		resp.Body.Close()
	}
	logs := env.TakeLogs()
	if len(logs) != 5 {
		t.Fatalf("%d decisions, want 5: %q", len(logs), fmt.Sprint(logs))
	}
	for _, l := range logs {
		for name, f := range map[string]string{"host": l.Host, "method": l.Method, "path": l.Path, "reason": l.Reason, "addr": l.Addr, "remote": l.Remote} {
			if !utf8.ValidString(f) {
				t.Errorf("%s %q: invalid UTF-8", name, f)
			}
			if i := strings.IndexFunc(f, func(c rune) bool { return !unicode.IsGraphic(c) }); i >= 0 {
				t.Errorf("%s %q: unprintable %U at %d", name, f, []rune(f[i:])[0], i)
			}
		}
	}
	for _, p := range []string{"/a", "/b", "/d"} {
		found := false
		for _, l := range logs {
			if strings.HasPrefix(l.Path, p+`\x0aegress allow`) && strings.Contains(l.Path, `\x0d\x1b[2K\u202e\u009b\u2028\xff`) {
				found = true
			}
		}
		if !found {
			paths := make([]string, len(logs))
			for i, l := range logs {
				paths[i] = l.Path
			}
			t.Errorf("no record of %s keeps its path, escaped: %q", p, paths)
		}
	}
}
