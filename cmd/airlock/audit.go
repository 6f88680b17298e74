//go:build !lean

package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/airlock-sandbox/airlock/internal/jobs"
	"github.com/airlock-sandbox/airlock/server"
)

func init() { commands["audit"].run = auditCmd }

func auditCmd(ctx context.Context, e *env) int {
	fs := e.flags(commands["audit"])
	pos, _, code, ok := e.parse(fs)
	if !ok {
		return code
	}
	if len(pos) < 2 || pos[0] != "verify" {
		return e.fail(jobs.Invalid("", "usage: airlock audit verify FILE... (see `airlock help audit`)"))
	}
	sum, err := server.VerifyAudit(pos[1:])
	if ce, ok := errors.AsType[*server.ChainError](err); ok {
		fmt.Fprintf(e.stderr, "airlock: audit chain broken at %v\n", ce)
		return exitFailed
	}
	if err != nil {
		return e.fail(jobs.Invalid("", "%v", err))
	}
	if sum.Records == 0 {
		fmt.Fprintf(e.stdout, "intact: no records in %s\n", plural(sum.Files, "file"))
		return exitOK
	}
	fmt.Fprintf(e.stdout, "intact: %s (seq %d to %d) in %s; the last record's SHA-256 is %s\n",
		plural(sum.Records, "record"), sum.First, sum.Last, plural(sum.Files, "file"), sum.LastHash)
	return exitOK
}

// plural is n and noun, with an s unless n is 1.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}
