package sanitize

import (
	"strings"
	"testing"

	egresscases "github.com/airlock-sandbox/airlock/corpus/egress"
)

// TestCorpusOutput runs every case of corpus/egress/output.jsonl: attacks
// must lose their offending URLs, benign documents must come back as
// expected (byte-identical where nothing needed changing), and the output
// must be a fixed point (sanitising it again changes nothing).
func TestCorpusOutput(t *testing.T) {
	docs, err := egresscases.Documents()
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) < 50 {
		t.Fatalf("only %d output cases loaded", len(docs))
	}
	for _, d := range docs {
		t.Run(strings.TrimPrefix(d.ID, "output/"), func(t *testing.T) {
			s, err := New(d.Allow...)
			if err != nil {
				t.Fatal(err)
			}
			out, findings := s.Markdown([]byte(d.Input))
			got := string(out)
			e := d.Expect
			if e.Unchanged && got != d.Input {
				t.Errorf("%s: changed a benign document:\n in: %q\nout: %q\nfindings: %+v", d.ID, d.Input, got, findings)
			}
			if e.Output != nil && got != *e.Output {
				t.Errorf("%s:\n got: %q\nwant: %q", d.ID, got, *e.Output)
			}
			for _, c := range e.Contains {
				if !strings.Contains(got, c) {
					t.Errorf("%s: output lacks %q: %q", d.ID, c, got)
				}
			}
			for _, c := range e.NotContains {
				if strings.Contains(strings.ToLower(got), strings.ToLower(c)) {
					t.Errorf("%s: output still holds %q: %q", d.ID, c, got)
				}
			}
			if d.Class == egresscases.Attack && len(findings) == 0 {
				t.Errorf("%s: attack neutralised without a finding", d.ID)
			}
			if again := s.MarkdownString(got); again != got {
				t.Errorf("%s: not a fixed point:\n 1: %q\n 2: %q", d.ID, got, again)
			}
		})
	}
}
