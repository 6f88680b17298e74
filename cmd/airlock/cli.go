package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/value"
	"github.com/airlock-sandbox/airlock/internal/version"
)

// Exit codes. They distinguish what went wrong so scripts can react.
const (
	exitOK          = 0 // the run succeeded
	exitFailed      = 1 // the code failed: a compile or runtime error (a program's non-zero exit is its own status)
	exitUsage       = 2 // invalid input: bad flags, a malformed job
	exitStopped     = 3 // stopped by a limit (timeout, memory, output, ...)
	exitDenied      = 4 // a withheld capability was attempted
	exitNotAdmitted = 5 // no tier may run the job
	exitInternal    = 6 // airlock itself failed
	exitMissing     = 7 // the tiers that may run the job need a backend not installed here (runsc, QEMU, a guest kernel)
)

// env is what a subcommand gets: its arguments and the standard streams.
type env struct {
	name   string // the subcommand's
	args   []string
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	// listFlags, when set, makes parse list the command's flags there
	// and stop before the command does anything (shell completion).
	listFlags io.Writer
	// flagFailed, when set, reports a flag parse failure instead of the
	// usual line on stderr (run --json: the failure is its one Result).
	flagFailed func(msg string)
}

type command struct {
	name    string
	summary string
	usage   string
	run     func(ctx context.Context, e *env) int
}

var commands = map[string]*command{}

// register adds a subcommand; each lives in its own file.
func register(c *command) { commands[c.name] = c }

// Run is the whole CLI: it parses args and runs one subcommand, writing to
// the given streams, and returns the process exit code.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	name := args[0]
	switch name {
	case "version", "-version", "--version":
		fmt.Fprintf(stdout, "airlock %s (%s, %s/%s)\n", version.String(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
		return exitOK
	case completeCmd:
		complete(ctx, args[1:], stdout)
		return exitOK
	case "help", "-h", "-help", "--help":
		if len(args) > 1 {
			// airlock help CMD is airlock CMD --help: the usage and every flag.
			if _, ok := commands[args[1]]; !ok {
				fmt.Fprintf(stderr, "airlock: unknown command %q (see `airlock help`)\n", args[1])
				return exitUsage
			}
			return Run(ctx, []string{args[1], "--help"}, stdin, stdout, stderr)
		}
		usage(stdout)
		return exitOK
	}
	c, ok := commands[name]
	if !ok {
		fmt.Fprintf(stderr, "airlock: unknown command %q (see `airlock help`)\n", name)
		return exitUsage
	}
	e := &env{name: name, args: args[1:], stdin: stdin, stdout: stdout, stderr: stderr}
	if c.run == nil { // a heavy command in a lean build (see heavy.go)
		return e.fail(execFull(name, args))
	}
	return c.run(ctx, e)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "airlock runs untrusted code inside the cheapest isolation boundary that still holds.")
	fmt.Fprintln(w, "\nusage: airlock COMMAND [flags] [args]   (airlock --version: which airlock this is)\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	width := 0
	for _, n := range names {
		width = max(width, len(n))
	}
	for _, n := range names {
		fmt.Fprintf(w, "  %-*s  %s\n", width, n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nexit codes: 0 ok, 1 code failed, 2 invalid input, 3 stopped by a limit, 4 capability denied, 5 not admitted, 6 internal error,\n7 backend missing (install it: make setup, or make install);\na program that ran to its end with a non-zero status: that status")
}

// flags returns a FlagSet for a subcommand that reports errors on stderr
// and prints its help, when asked for (-h, --help), on stdout.
func (e *env) flags(c *command) *flag.FlagSet {
	fs := flag.NewFlagSet("airlock "+c.name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "usage: airlock %s\n\n%s\n\nflags:\n", c.usage, c.summary)
		printFlags(w, fs)
	}
	return fs
}

// missingArgs is the one line for a command given too few or too many
// arguments: what it takes, and where its help is.
func (e *env) missingArgs(what string) int {
	fmt.Fprintf(e.stderr, "airlock %s: %s (see `airlock help %s`)\n", e.name, what, e.name)
	return exitUsage
}

// printFlags lists fs's flags as the help shows them, GNU-style
// ("--name VALUE"), which is also how they are best spelled.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		arg, text := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if arg != "" {
			line += " " + arg
		}
		text = strings.ReplaceAll(text, "\n", "\n    \t")
		switch f.DefValue {
		case "", "false", "0", "0s", "[]":
		default:
			text += fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintf(w, "%s\n    \t%s\n", line, text)
	})
}

// parse parses flags, allowing flags after positional arguments. It
// returns the positional arguments before a "--" and, separately, every
// argument after it; ok=false carries the exit code to use.
func (e *env) parse(fs *flag.FlagSet) (pos, rest []string, code int, ok bool) {
	if e.listFlags != nil {
		fs.VisitAll(func(f *flag.Flag) { fmt.Fprintln(e.listFlags, "--"+f.Name) })
		return nil, nil, exitOK, false
	}
	args := e.args
	fs.VisitAll(onceOnly)
	// The flag package prints the whole usage after any error; a bad value
	// deserves one line, and only -h the whole usage.
	usage := fs.Usage
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	defer func() { fs.Usage = usage; fs.SetOutput(e.stderr) }()
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.SetOutput(e.stdout)
				usage()
				return nil, nil, exitOK, false
			}
			msg := fmt.Sprintf("%s (see `airlock help %s`)", flagError(fs, err), strings.TrimPrefix(fs.Name(), "airlock "))
			if e.flagFailed != nil {
				e.flagFailed(msg)
			} else {
				fmt.Fprintf(e.stderr, "%s: %s\n", fs.Name(), msg)
			}
			return nil, nil, exitUsage, false
		}
		left := fs.Args()
		if consumed := len(args) - len(left); consumed > 0 && args[consumed-1] == "--" {
			return pos, left, 0, true
		}
		if len(left) == 0 {
			return pos, nil, 0, true
		}
		pos = append(pos, left[0])
		args = left[1:]
	}
}

// onceOnly makes f, if it takes one value (a string, number, boolean or
// duration: the flag package's own kinds; the repeatable ones are lists),
// refuse a second value that differs from its first: with the last one
// silently winning, `--situation public ... --situation internal` would
// run as the later one whoever reads the command line.
func onceOnly(f *flag.Flag) {
	g, ok := f.Value.(flag.Getter)
	if _, done := f.Value.(*onceValue); !ok || done {
		return
	}
	f.Value = &onceValue{Getter: g}
}

// onceValue is a single-valued flag that may be given twice only with the
// same value.
type onceValue struct {
	flag.Getter
	set   bool
	first string
}

func (o *onceValue) Set(s string) error {
	before := o.Get()
	if err := o.Getter.Set(s); err != nil {
		return err
	}
	if o.set && o.Get() != before {
		return fmt.Errorf("given twice with different values (first %q)", o.first)
	}
	o.set, o.first = true, s
	return nil
}

// IsBoolFlag keeps a boolean flag valueless on the command line.
func (o *onceValue) IsBoolFlag() bool {
	b, ok := o.Getter.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// parseFlagsOnly parses flags for a subcommand that takes no positional
// arguments; ok=false carries the exit code to use.
func (e *env) parseFlagsOnly(fs *flag.FlagSet) (code int, ok bool) {
	pos, _, code, ok := e.parse(fs)
	if !ok {
		return code, false
	}
	if len(pos) > 0 {
		fmt.Fprintf(e.stderr, "%s: unexpected argument %q\n", fs.Name(), pos[0])
		return exitUsage, false
	}
	return 0, true
}

// flagErrorRE matches the flag package's messages, which name a flag as
// -name and say only "parse error" for a number or duration it could not
// read.
var flagErrorRE = regexp.MustCompile(`^(?:flag provided but not defined: -+(\S+)|flag needs an argument: -+(\S+)|invalid (?:boolean )?value ("(?:[^"\\]|\\.)*") for (?:flag )?-+(\S+): (.*))$`)

// flagError says what went wrong with a flag in the words the help uses:
// --name, and what the value should look like.
func flagError(fs *flag.FlagSet, err error) string {
	m := flagErrorRE.FindStringSubmatch(err.Error())
	switch {
	case m == nil:
		return err.Error()
	case m[1] != "":
		return "unknown flag --" + m[1]
	case m[2] != "":
		return "--" + m[2] + " needs a value"
	}
	value, name, why := m[3], m[4], m[5]
	if why == "parse error" || why == "value out of range" {
		if f := fs.Lookup(name); f != nil {
			if g, ok := f.Value.(flag.Getter); ok {
				switch g.Get().(type) {
				case time.Duration:
					why = "want a duration such as 30s, 500ms or 2m"
				case int, int64, uint, uint64:
					why = "want a whole number"
				case float64:
					why = "want a number"
				case bool:
					why = "want true or false"
				}
			}
		}
	}
	return fmt.Sprintf("invalid value %s for --%s: %s", value, name, why)
}

// jobCommands are the subcommands whose invalid input is a job.
var jobCommands = map[string]bool{"run": true, "eval": true, "explain": true, "call": true}

// fail prints one clear line for err and returns the matching exit code.
func (e *env) fail(err error) int {
	msg := err.Error()
	if !jobCommands[e.name] {
		// Elsewhere the bad input was a flag, an argument or a file, and
		// "invalid job" would send the reader looking for a job.
		msg = strings.TrimPrefix(msg, "invalid job: ")
	}
	// A compile or runtime error keeps its lines (a traceback); any other
	// is one line.
	k := airlock.KindOf(err)
	fmt.Fprintf(e.stderr, "airlock: %s\n", value.Escaped(msg, k == airlock.ErrCompile || k == airlock.ErrRuntime))
	return exitCode(err)
}

func exitCode(err error) int {
	if err == nil {
		return exitOK
	}
	if _, ok := errors.AsType[*backendMissing](err); ok {
		return exitMissing
	}
	if _, ok := errors.AsType[*fullMissing](err); ok {
		return exitMissing
	}
	if s, ok := airlock.AsStop(err); ok {
		if s.Reason == airlock.StopDenied {
			return exitDenied
		}
		return exitStopped
	}
	switch airlock.KindOf(err) {
	case airlock.ErrInvalid:
		return exitUsage
	case airlock.ErrCompile, airlock.ErrRuntime:
		return exitFailed
	case airlock.ErrNotAdmitted:
		return exitNotAdmitted
	}
	return exitInternal
}
