//go:build !lean

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/bench"
	"github.com/airlock-sandbox/airlock/internal/tierset"
)

func init() { commands["bench"].run = benchCmd }

func benchCmd(ctx context.Context, e *env) int {
	c := commands["bench"]
	fs := e.flags(c)
	def := bench.NewConfig()
	tiers := fs.String("tiers", "", "comma-separated `TIERS` to measure (default: every tier)")
	iterations := fs.Int("iterations", def.Iterations(), "at most `N` runs per measurement")
	budget := fs.Duration("budget", def.Budget(), "`DURATION` per measurement (at least 5 runs are made regardless)")
	timeout := fs.Duration("timeout", def.Timeout(), "longest `DURATION` a single run may take")
	jsonMode := fs.Bool("json", false, "write the JSON report to stdout instead of the table")
	out := fs.String("out", "", "write report.json, chart.svg and chart.png into `DIR`")
	compare := fs.String("compare", "", "print the change against an earlier report.json `FILE`")
	var notes noteList
	fs.Var(&notes, "note", "a `NOTE` to record in the report (repeatable)")
	var tf tierFlags
	tf.register(fs)
	if code, ok := e.parseFlagsOnly(fs); !ok {
		return code
	}
	o, err := tf.options(tierset.Options{})
	if err != nil {
		return e.fail(err)
	}
	wholeProcessOnce.Do(func() { registerWholeProcess(o) })
	var old *bench.Report
	if *compare != "" {
		var err error
		if old, err = bench.Load(*compare); err != nil {
			fmt.Fprintf(e.stderr, "airlock bench: --compare: %v\n", err)
			return exitUsage
		}
	}
	cfg := def.WithSources(benchSources(o)...).WithNotes(notes...).WithIterations(*iterations).WithBudget(*budget).WithTimeout(*timeout).WithProgress(progress(e.stderr))
	if *tiers != "" {
		cfg = cfg.WithTiers(strings.Split(*tiers, ",")...)
	}
	rep, err := bench.Run(ctx, cfg)
	if err != nil {
		return e.fail(fmt.Errorf("benchmark: %w", err))
	}
	if *out != "" {
		if err := writeBenchOut(rep, *out); err != nil {
			return e.fail(err)
		}
		fmt.Fprintf(e.stderr, "airlock bench: wrote report.json, chart.svg and chart.png in %s\n", *out)
	}
	if *jsonMode {
		if err := rep.WriteJSON(e.stdout); err != nil {
			return e.fail(err)
		}
	} else {
		rep.WriteTable(e.stdout)
	}
	if old != nil {
		w := e.stdout
		if *jsonMode {
			w = e.stderr
		}
		fmt.Fprintln(w)
		rep.WriteCompare(w, old)
	}
	for _, r := range rep.Results {
		if r.Error != "" && r.Error != "no warm path" {
			return exitFailed
		}
	}
	return exitOK
}

func writeBenchOut(rep *bench.Report, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "report.json"))
	if err != nil {
		return err
	}
	if err := rep.WriteJSON(f); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := rep.SaveChart(filepath.Join(dir, "chart.svg")); err != nil {
		return err
	}
	return rep.SaveChart(filepath.Join(dir, "chart.png"))
}

// progress draws a bar on a terminal and plain lines elsewhere.
func progress(w io.Writer) func(bench.Progress) {
	tty := false
	if f, ok := w.(*os.File); ok {
		_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
		tty = err == nil
	}
	return func(p bench.Progress) {
		if !tty {
			if p.Label != "done" {
				fmt.Fprintf(w, "bench: [%d/%d] %s\n", p.Done+1, p.Total, p.Label)
			}
			return
		}
		const width = 30
		n := 0
		if p.Total > 0 {
			n = p.Done * width / p.Total
		}
		fmt.Fprintf(w, "\r\033[K[%s%s] %d/%d %s", strings.Repeat("#", n), strings.Repeat(".", width-n), p.Done, p.Total, p.Label)
		if p.Label == "done" {
			fmt.Fprint(w, "\r\033[K")
		}
	}
}

// noteList collects repeated --note flags.
type noteList []string

func (n *noteList) String() string     { return strings.Join(*n, "; ") }
func (n *noteList) Set(s string) error { *n = append(*n, s); return nil }

// benchSources are the command's tiers as o builds them. A tier with a
// pool or a snapshot is measured warm in its warm form (o.Warm: the
// settings o leaves unset), which a one-shot build leaves out.
func benchSources(o tierset.Options) []bench.TierSource {
	var out []bench.TierSource
	for _, t := range tierset.Entries() {
		s := bench.TierSource{Name: t.Name, New: func() (airlock.Tier, error) { return t.New(o) }}
		if t.Pooled {
			s.Warm = func() (airlock.Tier, error) { return t.New(o.Warm()) }
		}
		out = append(out, s)
	}
	return out
}

var wholeProcessOnce sync.Once

// registerWholeProcess adds the whole-process rows: this binary's own
// commands, start-up and exit included, each beside its paired reference
// (eval beside --version, run --tier process beside bwrap, run --tier
// gvisor beside runsc run of the sandbox the tier makes for it).
func registerWholeProcess(o tierset.Options) {
	exe, err := os.Executable()
	if err != nil {
		return
	}
	// Run as airlock-full, the rows time the lean airlock beside it: the
	// binary a user's commands start.
	if lean := filepath.Join(filepath.Dir(exe), "airlock"); filepath.Base(exe) == fullName {
		if st, err := os.Stat(lean); err == nil && st.Mode().IsRegular() {
			exe = lean
		}
	}
	// The command's test binary acts as the command only with this set;
	// the command itself ignores it.
	env := []string{"AIRLOCK_CLI_CHILD=1"}
	probe := func(name string) func() error {
		for _, e := range tierset.Entries() {
			if e.Name == name && e.Probe != nil {
				return func() error { return e.Probe(tierset.Options{}) }
			}
		}
		return nil
	}
	rows := []bench.Target{
		bench.WholeProcess("cli-version", airlock.KindExpr, []string{"expr"}, "", nil, env, []string{exe, "--version"}),
		bench.WholeProcess("cli-eval", airlock.KindExpr, []string{"expr"}, "cli-version", nil, env, []string{exe, "eval", "1+2"}),
		bench.WholeProcess("cli-run-process", airlock.KindCommand, []string{"process"}, "bwrap", probe("process"), env, []string{exe, "run", "--tier", "process", "--", bench.CommandPath}),
		bench.WholeProcess("cli-run-gvisor", airlock.KindCommand, []string{"gvisor"}, "runsc-run-tier", probe("gvisor"), env, []string{exe, "run", "--tier", "gvisor", "--", bench.CommandPath}),
		tierRunscRun(o, probe("gvisor")),
	}
	for _, t := range rows {
		bench.RegisterBaseline(func() bench.Target { return t })
	}
}

// referencer is a tier that can make ready, without running it, the sandbox
// a cold run of a job would start, and say the command that starts it bare.
type referencer interface {
	Reference(ctx context.Context, job airlock.Job) ([]string, func(), error)
}

// tierRunscRun is `runsc run` of exactly the sandbox `airlock run --tier
// gvisor` starts for the benchmark's command (its bundle, root, cgroup
// limits and flags), made ready untimed by a tier built with the run's
// options: the reference for that whole-process row.
func tierRunscRun(o tierset.Options, probe func() error) bench.Target {
	var entry tierset.Entry
	for _, e := range tierset.Entries() {
		if e.Name == "gvisor" {
			entry = e
		}
	}
	argv := func() ([]string, func(), error) {
		t, err := entry.New(o)
		if err != nil {
			return nil, nil, err
		}
		ref, ok := t.(referencer)
		if !ok {
			_ = tierset.Close([]airlock.Tier{t})
			return nil, nil, fmt.Errorf("tier %s has no bare reference", t.Name())
		}
		args, remove, err := ref.Reference(context.Background(), bench.Job(airlock.KindCommand))
		if err != nil {
			_ = tierset.Close([]airlock.Tier{t})
			return nil, nil, err
		}
		return args, func() {
			remove()
			_ = tierset.Close([]airlock.Tier{t})
		}, nil
	}
	available := func() error {
		if entry.New == nil {
			return errors.New("no gvisor tier in this build")
		}
		if probe != nil {
			return probe()
		}
		return nil
	}
	return bench.RawCommand("runsc-run-tier", []string{"gvisor"}, "runsc run of the sandbox the gvisor tier makes for "+bench.CommandPath+" (its bundle, cgroup and flags)", argv, available)
}
