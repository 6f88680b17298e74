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
	c := commands["eval"]
	fs := e.flags(c)
	var jf jobFlags
	var rf routerFlags
	jsonMode := fs.Bool("json", false, "write the whole Result as JSON")
	jf.register(fs, false)
	rf.register(fs)
	pos, rest, code, ok := e.parse(fs)
	if !ok {
		return code
	}
	pos = append(pos, rest...)
	if len(pos) == 0 {
		fs.Usage()
		return exitUsage
	}
	job := airlock.Job{Kind: airlock.KindExpr, Code: strings.Join(pos, " ")}
	if err := jf.apply(&job); err != nil {
		return e.fail(err)
	}
	r, closeAll, err := rf.open()
	if err != nil {
		return e.fail(err)
	}
	defer closeAll()
	res, err := r.Run(ctx, job)
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
