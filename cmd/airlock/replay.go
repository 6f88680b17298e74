//go:build !lean

package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/internal/jobs"
	"github.com/airlock-sandbox/airlock/internal/tierset"
	"github.com/airlock-sandbox/airlock/server"
)

func init() { commands["replay"].run = replayCmd }

func replayCmd(ctx context.Context, e *env) int {
	c := commands["replay"]
	fs := e.flags(c)
	jsonMode := fs.Bool("json", false, "write the replayed Result as JSON")
	images := fs.String("images", "", "image store directory (default: $"+image.DirEnv+", else "+image.DefaultDir()+")")
	pos, _, code, ok := e.parse(fs)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return e.fail(jobs.Invalid("", "replay takes one RECORD (see `airlock help replay`)"))
	}
	line, err := readRecord(e, pos[0])
	if err != nil {
		return e.fail(err)
	}
	rec, err := server.ParseRecord(line)
	if err != nil {
		return e.fail(jobs.Invalid("", "%s", err.Error()))
	}
	o, err := (&tierFlags{images: *images}).options(tierset.Options{})
	if err != nil {
		return e.fail(err)
	}
	tiers, err := tierset.Build(o)
	if err != nil {
		return e.fail(err)
	}
	defer tierset.Close(tiers)
	res, match, err := server.Replay(ctx, rec, tiers)
	if err != nil {
		return e.fail(jobs.Invalid("", "%s", err.Error()))
	}
	if *jsonMode {
		if err := writeJSON(e.stdout, res); err != nil {
			return e.fail(err)
		}
	}
	got := server.OutputDigest(&res)
	if !match {
		fmt.Fprintf(e.stderr, "airlock: replay MISMATCH on %s: output %s, recorded %s\n", rec.Tier, got, rec.Output)
		return exitFailed
	}
	fmt.Fprintf(e.stderr, "airlock: replay matches on %s (clock %s, seed %d, output %s)\n", rec.Tier, rec.Clock.Format("2006-01-02T15:04:05.999999Z07:00"), rec.Seed, got)
	return exitOK
}

// readRecord reads one audit line: all of a file, line N of FILE:N, or
// standard input.
func readRecord(e *env, spec string) ([]byte, error) {
	name, n := spec, 0
	if i := strings.LastIndexByte(spec, ':'); i > 0 {
		if v, err := strconv.Atoi(spec[i+1:]); err == nil && v > 0 {
			name, n = spec[:i], v
		}
	}
	var r io.Reader = e.stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, jobs.Invalid("", "%v", err)
		}
		defer f.Close()
		r = f
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4*server.MaxAuditJob)
	var lines [][]byte
	for i := 1; sc.Scan(); i++ {
		if n == 0 || i == n {
			if l := bytes.TrimSpace(sc.Bytes()); len(l) > 0 {
				lines = append(lines, bytes.Clone(l))
			}
		}
		if n > 0 && i == n {
			break
		}
	}
	if err := sc.Err(); err != nil {
		return nil, jobs.Invalid("", "reading %s: %v", name, err)
	}
	switch {
	case len(lines) == 0:
		return nil, jobs.Invalid("", "no audit record in %s", spec)
	case len(lines) > 1:
		return nil, jobs.Invalid("", "%s holds %d records; name one as %s:N", name, len(lines), name)
	}
	return lines[0], nil
}
