package server_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/approve"
	"github.com/airlock-sandbox/airlock/server"
)

// TestApprovalDisplayShowsHiddenCharacters: a job whose argument hides a
// right-to-left override ("report<RLO>fdp.exe" reads as "reportexe.pdf")
// is shown to the approver with the override escaped and flagged, in
// GET /v1/approvals/{digest}'s display; the raw job stays for machines.
func TestApprovalDisplayShowsHiddenCharacters(t *testing.T) {
	f := newFixture(t, func(c *server.Config) {
		// A WebAssembly job takes argv and runs in process, in every build.
		rules := append(*c.Approvals.Rules, approve.Rule{Name: "every-wasm", Kinds: []airlock.Kind{airlock.KindWasm}})
		c.Approvals.Rules = &rules
	})
	job := `{"kind":"wasm","module":"AGFzbQEAAAA=","argv":["tool","report\u202efdp.exe"],"stdin":"\u001b[2J","input":{"n\u200bame":"x"}}`
	var req approvalReply
	if r := f.do("POST", "/v1/approvals", keyA, job); r.status != 200 {
		t.Fatalf("request approval: %d %s", r.status, r.body)
	} else {
		r.decode(t, &req)
	}
	if !req.Required {
		t.Fatalf("approval not required: %+v", req)
	}
	r := f.do("GET", "/v1/approvals/"+req.Digest, keyApprover, nil)
	var shown struct {
		Job     *airlock.Job     `json:"job"`
		Display *approve.Display `json:"display"`
	}
	r.decode(t, &shown)
	if shown.Job == nil || shown.Job.Argv[1] != "report\u202efdp.exe" {
		t.Errorf("the raw job is gone: %s", r.body)
	}
	d := shown.Display
	if d == nil {
		t.Fatalf("no display in GET /v1/approvals/{digest}: %s", r.body)
	}
	if d.Argv[1] != `report\u202efdp.exe` || d.Stdin == nil || d.Stdin.Text != `\x1b[2J` || d.Input[`n\u200bame`] != "x" {
		t.Errorf("display argv %q, stdin %+v, input %v", d.Argv, d.Stdin, d.Input)
	}
	want := []string{
		"argv[1]: U+202E RIGHT-TO-LEFT OVERRIDE at byte 6",
		"stdin: U+001B ESCAPE at byte 0",
		`input.n\u200bame (key): U+200B ZERO WIDTH SPACE at byte 1`,
	}
	if d.Hidden != 3 || !slices.Equal(d.Warnings, want) || !slices.Equal(d.Fields, []string{"argv[1]", "stdin", `input.n\u200bame (key)`}) {
		t.Errorf("hidden %d, fields %q, warnings %q; want %q", d.Hidden, d.Fields, d.Warnings, want)
	}
	if d.Tenant != "a" || d.Tier != req.Tier || d.Kind != "wasm" || d.Module == nil || !d.Module.Binary {
		t.Errorf("display %+v", d)
	}
	var raw map[string]json.RawMessage
	r.decode(t, &raw)
	if s := string(raw["display"]); strings.Contains(s, "\u202e") || strings.Contains(s, "\u200b") || strings.Contains(s, `\u001b`) {
		t.Errorf("the display holds a hidden character: %s", s)
	}
}
