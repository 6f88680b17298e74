package main

import (
	"context"
	"strings"

	"github.com/airlock-sandbox/airlock"
)

func init() {
	register(&command{
		name:    "eval",
		summary: "evaluate an expression and print its value as JSON",
		usage:   "eval [--input JSON|@FILE] [flags] EXPR",
		run:     evalCmd,
	})
}

func evalCmd(ctx context.Context, e *env) int {
	jc, code, ok := e.parseJobCommand("eval", "write the whole Result as JSON", false)
	if !ok {
		return code
	}
	jf, rf, jsonMode := &jc.jf, &jc.rf, jc.json
	pos := append(jc.pos, jc.rest...)
	job := airlock.Job{Kind: airlock.KindExpr, Code: strings.Join(pos, " ")}
	if err := jf.apply(&job); err != nil {
		return e.fail(err)
	}
	r, closeAll, err := rf.open()
	if err != nil {
		return e.fail(err)
	}
	defer closeAll()
	res, err := runFlagged(ctx, r, rf.images, job, jf)
	if *jsonMode {
		if werr := writeJSON(e.stdout, res); werr != nil {
			return e.fail(werr)
		}
		return exitCode(err)
	}
	if err != nil {
		return e.fail(err)
	}
	if werr := writeJSON(e.stdout, res.Value); werr != nil {
		return e.fail(werr)
	}
	return exitOK
}
