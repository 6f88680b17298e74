package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/airlock-sandbox/airlock/internal/value"
)

// WriteTable prints the report for people.
func (r *Report) WriteTable(w io.Writer) {
	m := r.Machine
	fmt.Fprintf(w, "airlock bench — %s, %d cores, %s, %s, %s, load %.1f at start, %.0f s\n\n",
		m.CPU, m.Cores, m.Kernel, m.Go, m.kvmWords(), m.Load1, r.Seconds)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "TARGET\tTYPE\tMODE\tN\tP50\tP95\tP99\tMIN\tMAX\tCPU/RUN\tVS RAW\tVS PEERS\t")
	for _, x := range r.Results {
		if x.Error != "" {
			fmt.Fprintf(tw, "%s\t%s\t%s\t-\t\t\t\t\t\t\t\t%s\t\n", x.Label(), x.Type, x.Mode, value.Clip(x.Error, 200))
			continue
		}
		vs := ""
		if x.Raw != "" {
			vs = fmt.Sprintf("%.2f× %s", x.RawRatio, x.Raw)
			if x.Paired {
				vs += " (paired)"
			}
		}
		var peers []string
		for _, p := range x.Peers {
			peers = append(peers, fmt.Sprintf("%.2f× %s", p.Ratio, p.Name))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", x.Label(), x.Type, x.Mode, x.N,
			Dur(x.P50), Dur(x.P95), Dur(x.P99), Dur(x.Min), Dur(x.Max), Dur(x.CPU), vs, strings.Join(peers, ", "))
	}
	tw.Flush()
	var batched []string
	for _, x := range r.Results {
		if x.Error == "" && x.Batch > 1 {
			batched = append(batched, fmt.Sprintf("%s %s ×%d", x.Name, x.Mode, x.Batch))
		}
	}
	if len(batched) > 0 {
		fmt.Fprintf(w, "\ntimed in batches (runs shorter than a few clock reads; each sample is its batch's mean): %s\n", strings.Join(batched, ", "))
	}
	if len(r.Routes) > 0 {
		fmt.Fprintln(w, "\ntier: auto (default policy) — what an agent pays per situation, warm")
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SITUATION\tKIND\tTIER\tP50\tP95\tNOTE")
		for _, x := range r.Routes {
			if x.Stats == nil {
				fmt.Fprintf(tw, "%s\t%s\t%s\t-\t-\t%s\n", x.Situation, x.Kind, orDash(x.Tier), value.Clip(x.Error, 200))
				continue
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t\n", x.Situation, x.Kind, x.Tier, Dur(x.Stats.P50), Dur(x.Stats.P95))
		}
		tw.Flush()
	}
	if r.Router != nil {
		fmt.Fprintf(w, "\nrouter: %s per decision; router.Run over the tier's own warm run: %s\n", Dur(r.Router.RouteNS/1000), Dur(r.Router.RunOverheadUS))
	}
	if len(r.Skipped) > 0 {
		fmt.Fprintln(w, "\nskipped:")
		for _, s := range r.Skipped {
			fmt.Fprintf(w, "  %s (%s): %s\n", s.Name, s.Type, s.Reason)
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "\nnote: %s\n", n)
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// Dur formats microseconds with a unit that keeps three significant digits.
func Dur(us float64) string {
	neg := ""
	if us < 0 {
		neg, us = "-", -us
	}
	switch {
	case us < 1:
		return fmt.Sprintf("%s%.0fns", neg, us*1000)
	case us < 1000:
		return fmt.Sprintf("%s%.3gµs", neg, us)
	case us < 1e6:
		return fmt.Sprintf("%s%.3gms", neg, us/1000)
	}
	return fmt.Sprintf("%s%.3gs", neg, us/1e6)
}

// WriteJSON writes the report in its stable JSON form.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(r)
}

// Load reads a report written by WriteJSON. It refuses other schemas.
func Load(path string) (*Report, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Report
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if r.Schema != Schema {
		return nil, fmt.Errorf("%s: schema %q, want %q", path, r.Schema, Schema)
	}
	return &r, nil
}

// WriteCompare prints how each median changed from old to r.
func (r *Report) WriteCompare(w io.Writer, old *Report) {
	fmt.Fprintf(w, "change against the run of %s (%s, %d cores):\n", old.Started.Format("2006-01-02 15:04"), old.Machine.CPU, old.Machine.Cores)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "TARGET\tMODE\tOLD P50\tNEW P50\tCHANGE\tOLD VS RAW\tNEW VS RAW\t")
	prev := map[string]Result{}
	for _, x := range old.Results {
		prev[x.Name+"/"+x.Mode] = x
	}
	for _, x := range r.Results {
		o, ok := prev[x.Name+"/"+x.Mode]
		if !ok || x.Error != "" || o.Error != "" {
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", x.Name, x.Mode, Dur(o.P50), Dur(x.P50), change(o.P50, x.P50), rawRatio(o), rawRatio(x))
	}
	tw.Flush()
}

func change(old, cur float64) string {
	if old <= 0 {
		return "-"
	}
	return fmt.Sprintf("%+.1f%%", (cur-old)/old*100)
}

func rawRatio(x Result) string {
	if x.Raw == "" {
		return "-"
	}
	return fmt.Sprintf("%.2f×", x.RawRatio)
}
