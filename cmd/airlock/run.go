package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/jobs"
)

func init() {
	register(&command{
		name:    "run",
		summary: "run a script, module, program or JSON job in the cheapest tier that holds",
		usage: `run [flags] FILE [-- ARGS...]      run a .expr, .star or .wasm file (kind from the extension or --kind),
                                                  or a script (.py, .sh, .js, ... or a #! line) placed in the scratch as a command job
       airlock run [flags] -- PROGRAM [ARGS...]   run a program (a command job)
       airlock run [flags] JOB.json|-|--job FILE  run a Job written as JSON (- reads it from stdin)
                                                  --json with any of them: one Result as JSON instead of streamed output`,
		run: runCmd,
	})
}

func runCmd(ctx context.Context, e *env) int {
	jc, code, ok := e.parseJobCommand("run", "write exactly one Result as JSON on stdout, also for invalid input, instead of streaming the output", true)
	if !ok {
		return code
	}
	jf, rf := &jc.jf, &jc.rf
	job, err := runJob(e, jc)
	if err == nil {
		err = jf.out.apply(&job, *jc.json)
	}
	if *jc.json {
		return runJSON(ctx, e, job, err, jf, rf)
	}
	if err != nil {
		return e.fail(err)
	}
	rf.tiers.progress = e.imageProgress()
	r, closeAll, err := rf.open()
	if err != nil {
		return e.fail(err)
	}
	defer closeAll()
	// The program's output is written as it comes, as docker run does;
	// report then writes only what the sink was not given.
	var out, errOut liveWriter
	out.w, errOut.w = e.stdout, e.stderr
	ctx = airlock.WithOutput(ctx, func(stream airlock.Stream, p []byte) {
		if stream == airlock.Stderr {
			errOut.write(p)
		} else {
			out.write(p)
		}
	})
	res, err := runFlagged(ctx, r, rf.images, job, jf)
	if werr := jf.out.write(&res, e.stderr); werr != nil && err == nil {
		err = werr
	}
	shown := res
	shown.Stdout, shown.Stderr = out.rest(res.Stdout), errOut.rest(res.Stderr)
	return e.report(&job, shown, err)
}

// liveWriter writes a stream's chunks as they come and counts them.
type liveWriter struct {
	w io.Writer
	n int
}

func (l *liveWriter) write(p []byte) {
	_, _ = l.w.Write(p)
	l.n += len(p)
}

// rest is what of the result's whole output was not written yet.
func (l *liveWriter) rest(all string) string {
	if l.n >= len(all) {
		return ""
	}
	return all[l.n:]
}

// runJob is the job run was given: a Job written as JSON (--job FILE, a
// FILE ending in .json, or - without --kind: stdin), with the flags added
// to it, or one built from a script, module or program.
func runJob(e *env, jc *jobCommand) (airlock.Job, error) {
	src := *jc.job
	if src == "" && len(jc.pos) == 1 && ((jc.pos[0] == "-" && jc.jf.kind == "") || strings.EqualFold(filepath.Ext(jc.pos[0]), ".json")) {
		src = jc.pos[0]
	} else if src != "" && len(jc.pos) > 0 {
		return airlock.Job{}, jobs.Invalid("", "--job and a FILE: give one of them")
	}
	if src == "" {
		return buildJob(e, jc.pos, jc.rest, &jc.jf)
	}
	if len(jc.rest) > 0 {
		return airlock.Job{}, jobs.Invalid("", "a Job written as JSON takes no arguments; put them in its argv")
	}
	if jc.jf.kind != "" {
		return airlock.Job{}, jobs.Invalid("--kind", "a Job written as JSON names its own kind")
	}
	var r io.Reader = e.stdin
	if src != "-" {
		f, err := os.Open(src)
		if err != nil {
			return airlock.Job{}, jobs.Invalid("", "%v", err)
		}
		defer f.Close()
		r = f
	}
	job, err := readJob(r)
	if err != nil {
		return job, err
	}
	return job, jc.jf.apply(&job)
}

// runJSON always writes exactly one Result, for invalid input too (err,
// the job's own error, is then the Result's).
func runJSON(ctx context.Context, e *env, job airlock.Job, err error, jf *jobFlags, rf *routerFlags) int {
	finish := func(res airlock.Result, err error) int {
		if err != nil && res.Error == nil && res.Stopped == nil {
			res.SetError(err)
		}
		if werr := writeJSON(e.stdout, res); werr != nil {
			fmt.Fprintf(e.stderr, "airlock: writing result: %v\n", werr)
			return exitInternal
		}
		if err != nil {
			return exitCode(err)
		}
		if res.ExitCode != 0 {
			return programExit(res.ExitCode)
		}
		return exitOK
	}
	if err != nil {
		return finish(airlock.Result{}, err)
	}
	rf.tiers.progress = e.imageProgress()
	r, closeAll, err := rf.open()
	if err != nil {
		return finish(airlock.Result{}, err)
	}
	defer closeAll()
	res, err := runFlagged(ctx, r, rf.images, job, jf)
	if werr := jf.out.write(&res, io.Discard); werr != nil && err == nil {
		err = werr
	}
	return finish(res, err)
}

var kindByExt = map[string]airlock.Kind{
	".expr": airlock.KindExpr, ".star": airlock.KindStarlark, ".starlark": airlock.KindStarlark,
	".bzl": airlock.KindStarlark, ".wasm": airlock.KindWasm,
}

// interpreterByExt runs a script file as a command job: the file is placed
// in the scratch directory and run by the interpreter its extension names
// (or its #! line, which wins).
var interpreterByExt = map[string]string{
	".py": "python3", ".sh": "sh", ".bash": "bash", ".js": "node", ".rb": "ruby", ".pl": "perl",
}

// shebang returns the interpreter and its argument from a script's first
// line ("#!/usr/bin/env python3" gives python3), or nil.
func shebang(data []byte) []string {
	if !bytes.HasPrefix(data, []byte("#!")) {
		return nil
	}
	line, _, _ := bytes.Cut(data[2:], []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) > 1 && filepath.Base(f[0]) == "env" {
		f = f[1:]
		if len(f) > 1 && f[0] == "-S" {
			f = f[1:]
		}
	}
	return f
}

func knownScripts() string {
	exts := make([]string, 0, len(interpreterByExt))
	for e := range interpreterByExt {
		exts = append(exts, e)
	}
	slices.Sort(exts)
	return strings.Join(exts, " ")
}

func buildJob(e *env, pos, rest []string, jf *jobFlags) (airlock.Job, error) {
	var job airlock.Job
	switch {
	case len(pos) == 0 && len(rest) == 0:
		return job, jobs.Invalid("", "nothing to run: give a FILE, a Job as JSON (JOB.json, - or --job FILE), or -- PROGRAM ARGS (see `airlock help run`)")
	case len(pos) > 1:
		return job, jobs.Invalid("", "one FILE at a time (put program arguments after --): %s", strings.Join(pos, " "))
	case len(pos) == 0:
		job.Kind = airlock.KindCommand
		job.Argv = rest
	default:
		file := pos[0]
		var data []byte
		var err error
		if file == "-" {
			var s string
			s, err = readStdin(e.stdin)
			data = []byte(s)
		} else {
			data, err = readLocal(file)
		}
		if err != nil {
			return job, jobs.Invalid("", "%v", err)
		}
		ext := strings.ToLower(filepath.Ext(file))
		kind := airlock.Kind(jf.kind)
		interp := shebang(data)
		if interp == nil && interpreterByExt[ext] != "" {
			interp = []string{interpreterByExt[ext]}
		}
		if kind == "" {
			kind = kindByExt[ext]
		}
		if kind == "" && interp != nil {
			kind = airlock.KindCommand
		}
		if kind == "" {
			return job, jobs.Invalid("kind", "cannot tell the kind of %q from its extension or a #! line; use --kind", file)
		}
		job.Kind = kind
		switch kind {
		case airlock.KindWasm:
			job.Module = data
			job.Argv = rest // the tier supplies argv[0]
		case airlock.KindCommand:
			if interp == nil || file == "-" {
				return job, jobs.Invalid("kind", "a command job takes a script with a known extension (%s) or a #! line, or its program after --", knownScripts())
			}
			if !utf8.Valid(data) {
				return job, jobs.Invalid("", "%s is not text; a script must be UTF-8", file)
			}
			name := filepath.Base(file)
			job.Files = map[string]string{name: string(data)}
			job.Argv = append(append(interp, name), rest...)
		default:
			job.Code = string(data)
			if kind == airlock.KindStarlark && file != "-" && ext == ".star" {
				// Held in files too, the script is named as the user
				// named it in errors and tracebacks, not job.star.
				job.Files = map[string]string{filepath.Base(file): job.Code}
			}
			if len(rest) > 0 {
				return job, jobs.Invalid("", "%s jobs take no arguments; pass variables with --input", kind)
			}
		}
	}
	if err := jf.apply(&job); err != nil {
		return job, err
	}
	if job.Kind == airlock.KindCommand || (job.Kind == airlock.KindWasm && !(len(pos) == 1 && pos[0] == "-")) {
		in, err := readStdin(e.stdin)
		if err != nil {
			return job, err
		}
		job.Stdin = in
	}
	return job, nil
}
