package runner

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/airlock-sandbox/airlock/internal/value"
)

// WriteJSON writes the report in its stable JSON form.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(r)
}

// WriteTable prints the report for people: counts per tier and area, then
// every escape and wrongly blocked benign case with its evidence.
func (r *Report) WriteTable(w io.Writer, verbose bool) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIER\tAREA\tCONTAINED\tESCAPED\tBENIGN OK\tBENIGN BLOCKED\tSKIPPED")
	for _, c := range r.Counts {
		skip := fmt.Sprint(c.Skipped)
		if c.Skipped > 0 {
			skip += " (" + value.Clip(c.SkipReason, 90) + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%s\n", c.Tier, c.Area, c.Contained, c.Escaped, c.BenignPassed, c.BenignBlocked, skip)
	}
	tw.Flush()
	for _, t := range r.Tiers {
		if !t.Available {
			fmt.Fprintf(w, "\ntier %s unavailable here: %s\n", t.Name, t.Reason)
		}
	}
	for _, v := range r.Verdicts {
		show := v.Result == Escaped || v.Result == BenignBlocked || (verbose && v.Result != SkippedCase)
		if !show {
			continue
		}
		fmt.Fprintf(w, "\n%s on %s: %s (outcome %s, %d ms)\n", v.Case, v.Tier, strings.ToUpper(v.Result), v.Outcome, v.Millis)
		if v.Detail != "" && (len(v.Evidence) == 0 || v.Evidence[0] != v.Detail) {
			fmt.Fprintf(w, "  %s\n", value.Clip(v.Detail, 300))
		}
		for _, e := range v.Evidence {
			fmt.Fprintf(w, "  evidence: %s\n", value.Clip(e, 300))
		}
	}
	for _, u := range r.Uncovered {
		fmt.Fprintf(w, "\nnot covered here: %s — %s\n", u.Area, u.Why)
	}
	esc, blk := 0, 0
	for _, c := range r.Counts {
		esc += c.Escaped
		blk += c.BenignBlocked
	}
	fmt.Fprintf(w, "\n%d verdicts in %.1f s: %d escaped, %d benign blocked\n", len(r.Verdicts), r.Seconds, esc, blk)
}
