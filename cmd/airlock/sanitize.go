//go:build !lean

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/airlock-sandbox/airlock/egress/sanitize"
)

// maxSanitizeInput bounds what `airlock sanitize` reads.
const maxSanitizeInput = 64 << 20

func init() { commands["sanitize"].run = runSanitize }

// hostList is a repeatable, comma-separable flag.
type hostList []string

func (h *hostList) String() string { return strings.Join(*h, ",") }

func (h *hostList) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*h = append(*h, s)
		}
	}
	return nil
}

func runSanitize(_ context.Context, e *env) int {
	c := commands["sanitize"]
	fs := e.flags(c)
	var allow hostList
	fs.Var(&allow, "allow", "a `HOST` whose URLs may stay (repeatable, or comma-separated; \"*.name\" for subdomains)")
	var relax hostList
	fs.Var(&relax, "relax", "an allowed `HOST` whose URLs may carry other URLs and host names in their query, fragment and path (repeatable, or comma-separated)")
	isHTML := fs.Bool("html", false, "the input is HTML rather than markdown")
	report := fs.Bool("report", false, "print what was neutralised on stderr, as JSON lines")
	pos, rest, code, ok := e.parse(fs)
	if !ok {
		return code
	}
	pos = append(pos, rest...)
	allow = append(allow, pos...)
	for _, h := range relax {
		allow = append(allow, sanitize.Relaxed+h)
	}
	s, err := sanitize.New(allow...)
	if err != nil {
		fmt.Fprintf(e.stderr, "airlock sanitize: --allow, --relax: %v\n", err)
		return exitUsage
	}
	in, err := io.ReadAll(io.LimitReader(e.stdin, maxSanitizeInput+1))
	if err != nil {
		return e.fail(fmt.Errorf("reading input: %w", err))
	}
	if len(in) > maxSanitizeInput {
		fmt.Fprintf(e.stderr, "airlock sanitize: input is larger than %d bytes\n", maxSanitizeInput)
		return exitUsage
	}
	var out []byte
	var findings []sanitize.Finding
	if *isHTML {
		out, findings = s.HTML(in)
	} else {
		out, findings = s.Markdown(in)
	}
	if _, err := e.stdout.Write(out); err != nil {
		return e.fail(err)
	}
	if *report {
		enc := json.NewEncoder(e.stderr)
		for _, f := range findings {
			_ = enc.Encode(f)
		}
	}
	return exitOK
}
