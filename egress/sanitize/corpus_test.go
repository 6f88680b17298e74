package sanitize_test

import (
	"strings"
	"testing"

	egresscases "github.com/airlock-sandbox/airlock/corpus/egress"
)

// TestCorpusOutput runs every case of corpus/egress/output.jsonl through
// the sanitiser, judged by egresscases.Document.Check (as `airlock corpus`
// judges them).
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
			if problems, _ := d.Check(egresscases.Sanitiser); len(problems) > 0 {
				t.Errorf("%s (%s): %s\n in: %q", d.ID, d.Class, strings.Join(problems, "; "), d.Input)
			}
		})
	}
}
