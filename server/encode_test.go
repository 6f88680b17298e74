package server

import (
	"bytes"
	"math/big"
	"reflect"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/jsonappend"
)

// awkward are strings that take every escaping path of encoding/json.
var awkward = []string{"", "plain text", `quote " and \ backslash`, "<b>&amp;</b>", "tab\tnew\nline\r",
	"\x00\x01\x1f\x7f", "é ü 漢字 🙂", "bad \xff\xfe utf-8", "line\u2028sep\u2029", "a\bb\fc"}

// sameAsStd compares got with what encoding/json writes for v
// (jsonappend.Any is an encoding/json Encoder, without the newline).
func sameAsStd(t testing.TB, what string, got []byte, err error, v any) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	want, err := jsonappend.Any(nil, v, false)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s:\n got %s\nwant %s", what, got, want)
	}
}

func records() []Record {
	clock := time.Date(2026, 1, 2, 3, 4, 5, 600, time.UTC)
	job := airlock.Job{Kind: airlock.KindExpr, Code: "a + b", Input: map[string]any{"a": int64(1), "b": 2.5, "z": "<x>", "big": new(big.Int).Lsh(big.NewInt(1), 80),
		"list": []any{true, nil, "s", map[string]any{"k": int64(-3)}}, "empty": map[string]any{}, "none": []any{}}}
	full := airlock.Job{Kind: airlock.KindCommand, Code: "c", Module: []byte{0, 1, 2, 250}, Entry: "main", Argv: []string{"echo", "hi\n"},
		Stdin: "in", Input: map[string]any{"x": int64(1)}, Files: map[string]string{"b.txt": "B", "a.txt": "<A>", "c.bin": "\x00\xff<"}, Collect: []string{"out/*.png", "<a>"},
		Env:   map[string]string{"LANG": "C.UTF-8", "A": "<&>"},
		Image: "registry.example/a<b>@sha256:00",
		Grants: airlock.Grants{FS: airlock.FSGrant{Read: []string{"/etc"}, ScratchMB: 8}, Net: []airlock.NetRule{{Host: "example.com", Methods: []string{"GET"}, Ports: []int{443}}},
			Spawn: true, Secrets: map[string]string{"TOKEN": redacted}},
		Limits: airlock.Limits{WallMS: 1, CPUMS: 2, MemoryMB: 3, OutputBytes: 4, Pids: 5, Files: 6, Steps: 7},
		Clock:  clock.In(time.FixedZone("X", 3600)), Seed: 1<<63 + 5, Situation: airlock.SituationInternal, Lifecycle: airlock.LifecycleEphemeral,
		Session: "s1", Tier: "gvisor", Account: "prod<1>"}
	recs := []Record{
		{},
		{Time: clock, Tenant: "a", Request: "run", Digest: "d", Tier: "expr", Limits: airlock.Limits{WallMS: 100}, Outcome: "ok", Output: "o", Job: &job},
		{Time: clock, Tenant: "t", Request: "session_run", Session: "s", Replica: "r-1", Digest: "d", Approval: "rule", Approver: "approver:<&>", Reason: "why \u202e", Tier: "starlark", Image: "sha256:<&>", Decision: []string{"rule a", "b"},
			Grants: full.Grants, Limits: full.Limits, Clock: clock, Seed: 42, Egress: []string{"GET example.com allowed"}, Outcome: "stopped_denied",
			Stopped: &airlock.Stop{Reason: airlock.StopDenied, Detail: "fs: open /etc/passwd"}, Error: "runtime: boom", ExitCode: -1,
			Timings: airlock.Timings{StartUS: 1, RunUS: 2, TotalUS: 3}, QueueUS: 9, Output: "x", Job: &full},
		{Time: time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), Tenant: "year 1", Grants: airlock.Grants{Net: []airlock.NetRule{}}, Job: &airlock.Job{Grants: airlock.Grants{Secrets: map[string]string{}}}},
		{Time: clock.Local(), Stopped: &airlock.Stop{Reason: airlock.StopKilled}},
	}
	for _, s := range awkward {
		recs = append(recs, Record{Time: clock, Tenant: s, Request: s, Session: s, Replica: s, Digest: "d", Approval: s, Approver: s, Reason: s, Tier: s, Image: s, Decision: []string{s},
			Outcome: s, Error: s, Output: s, Job: &airlock.Job{Kind: airlock.Kind(s), Code: s, Argv: []string{s}, Input: map[string]any{s: s}, Files: map[string]string{s: s}}})
	}
	return recs
}

// TestEncodersMatchEncodingJSON holds the hand-written encoders of the
// hot path to encoding/json's exact bytes.
func TestEncodersMatchEncodingJSON(t *testing.T) {
	for _, r := range records() {
		got, err := appendRecord(nil, &r)
		sameAsStd(t, "record "+r.Tenant, got, err, r)
	}
	results := []airlock.Result{{}, {Tier: "expr", Level: 1, Value: int64(5), Timings: airlock.Timings{TotalUS: 1}},
		{Tier: "starlark", Level: 1, Value: []any{1.5, "<x>", map[string]any{"k": nil}}, Stdout: "out\n", Stderr: "é", ExitCode: 2,
			Stopped: &airlock.Stop{Reason: airlock.StopSteps, Detail: "d"}, Error: &airlock.ErrorInfo{Kind: airlock.ErrRuntime, Message: "m\"x"},
			Timings: airlock.Timings{StartUS: 1, RunUS: 2, TotalUS: 3}, Usage: airlock.Usage{Steps: 1, MemoryBytes: 2, OutputBytes: 3, CPUUS: 4}, Clock: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Seed: 7, Image: "sha256:<&>", Decision: []string{"a", "b"},
			Files: map[string]string{"b": "<b>", "a.bin": "\x89PNG\xff"}, FilesSkipped: []string{"l: a symbolic link, not followed"}, Replica: "r<1>"},
		{Value: map[string]int{"x": 1}, Usage: airlock.Usage{OutputBytes: 3}},
	}
	for _, s := range awkward {
		results = append(results, airlock.Result{Tier: s, Value: s, Stdout: s, Stderr: s, Decision: []string{s}})
	}
	// The fullest record and result set every field, so that a field
	// added to these types and not to the encoders fails here.
	full, res := records()[2], results[2]
	for _, v := range []any{full, *full.Job, full.Job.Limits, full.Timings, *full.Stopped, res, res.Usage, *res.Error} {
		everyField(t, v)
	}
	for _, r := range results {
		got, err := appendResult(nil, &r)
		sameAsStd(t, "result", got, err, r)
	}
	// A time encoding/json refuses is refused here too.
	far := Record{Time: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}
	if _, err := appendRecord(nil, &far); err == nil {
		t.Error("a record in the year 10000 encoded")
	}
}

// everyField fails for each field of the struct v that is zero.
func everyField(t *testing.T, v any) {
	t.Helper()
	rv := reflect.ValueOf(v)
	for i := range rv.NumField() {
		if rv.Field(i).IsZero() {
			t.Errorf("%s.%s is not set in the encoder test: set it, and check the encoders write it", rv.Type(), rv.Type().Field(i).Name)
		}
	}
}
