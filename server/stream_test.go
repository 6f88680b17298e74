package server_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/testing/tiertest"
	"github.com/airlock-sandbox/airlock/internal/wirebytes"
	"github.com/airlock-sandbox/airlock/server"
)

// event is one line of an ndjson answer or one SSE event: its name and
// its JSON value.
type event struct {
	name string
	data json.RawMessage
}

// nextEvent reads one event in the answer's format.
func nextEvent(t *testing.T, r *bufio.Reader, sse bool) event {
	t.Helper()
	if !sse {
		line, err := r.ReadBytes('\n')
		if err != nil {
			t.Fatalf("reading a line: %v (%q)", err, line)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(line, &m); err != nil || len(m) != 1 {
			t.Fatalf("line %q: want one member, %v", line, err)
		}
		for k, v := range m {
			return event{k, v}
		}
	}
	var ev event
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("reading an event: %v (%q)", err, line)
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "" && ev.name != "":
			return ev
		case strings.HasPrefix(line, "event: "):
			ev.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			ev.data = json.RawMessage(strings.TrimPrefix(line, "data: "))
		default:
			t.Fatalf("unexpected SSE line %q", line)
		}
	}
}

// TestRunStreams: with Accept ndjson or SSE, the first line of a shell
// job arrives while the job waits for the test to have read it, then the
// rest, then the Result; a refusal keeps its status and JSON body.
func TestRunStreams(t *testing.T) {
	for _, format := range []string{"application/x-ndjson", "text/event-stream"} {
		t.Run(format, func(t *testing.T) {
			job, open := tiertest.ShellGate(t)
			job.Tier, job.Situation = "process", airlock.SituationInternal
			job.Limits.WallMS = 5000 // the tenant's maximum
			f := newFixture(t, func(c *server.Config) { c.Tenants[0].ReadRoots = job.Grants.FS.Read })
			if err := f.srv.Router().Unavailable("process"); err != nil {
				tiertest.Unavailable(t, "process", err)
			}
			res := postStreamed(t, f, "/v1/run", job, format, "first\n", open)
			tiertest.CheckGated(t, res)
			// The run is in the audit trail, as without streaming.
			if lines := f.audit.Lines(); !strings.Contains(lines[len(lines)-1], `"outcome":"ok"`) {
				t.Fatalf("audit: %s", lines[len(lines)-1])
			}

			// A job the approval rules hold is refused as before.
			rf := f.do("POST", "/v1/run", keyA, airlock.Job{Kind: airlock.KindStarlark, Code: "print(1)", Situation: airlock.SituationInternal}, "Accept", format)
			if rf.status != http.StatusForbidden || !strings.HasPrefix(rf.header.Get("Content-Type"), "application/json") || !strings.Contains(string(rf.body), `"not_admitted"`) {
				t.Fatalf("refused: status %d %q %s", rf.status, rf.header.Get("Content-Type"), rf.body)
			}
		})
	}
}

// postStreamed posts job to path as tenant a, accepting format, and reads
// the streamed answer: open is called once stdout so far holds first, and
// the Result must come after that, with the output the events carried.
// Nothing may follow the Result.
func postStreamed(t *testing.T, f *fixture, path string, job airlock.Job, format, first string, open func()) airlock.Result {
	t.Helper()
	body, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("POST", f.http.URL+path, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+keyA)
	req.Header.Set("Accept", format)
	resp, err := f.http.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != format {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d, type %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	r := bufio.NewReader(resp.Body)
	var out, errOut strings.Builder
	opened := false
	for {
		ev := nextEvent(t, r, format == "text/event-stream")
		if ev.name == "result" {
			var res airlock.Result
			if err := json.Unmarshal(ev.data, &res); err != nil {
				t.Fatalf("result %s: %v", ev.data, err)
			}
			if !opened {
				t.Fatalf("the result came before %q: %+v", first, res)
			}
			if out.String() != res.Stdout || errOut.String() != res.Stderr {
				t.Fatalf("streamed %q %q, result %q %q", out.String(), errOut.String(), res.Stdout, res.Stderr)
			}
			if rest, _ := io.ReadAll(r); len(rest) > 0 {
				t.Fatalf("after the result: %q", rest)
			}
			return res
		}
		s, err := wirebytes.Decode(ev.data)
		if err != nil {
			t.Fatalf("event %s %s: %v", ev.name, ev.data, err)
		}
		switch ev.name {
		case "stdout":
			out.WriteString(s)
		case "stderr":
			errOut.WriteString(s)
		default:
			t.Fatalf("unexpected event %s %s", ev.name, ev.data)
		}
		if !opened && strings.Contains(out.String(), first) {
			opened = true
			open() // the job goes on only now
		}
	}
}
