//go:build !lean

package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/corpus/runner"
	"github.com/airlock-sandbox/airlock/internal/tierset"
	"github.com/airlock-sandbox/airlock/server"
)

func init() { commands["corpus"].run = corpusCmd }

func corpusCmd(ctx context.Context, e *env) int {
	return corpusWith(ctx, e, corpusSources())
}

// corpusSources are the command's tiers, built with the default settings,
// and the server the server cases run against, over the same tiers.
func corpusSources() []runner.TierSource {
	var out []runner.TierSource
	for _, t := range tierset.Entries() {
		out = append(out, runner.TierSource{Name: t.Name, New: func() (airlock.Tier, error) { return t.New(tierset.Options{}) }})
	}
	serverTiers := func(cfg server.Config) ([]airlock.Tier, error) {
		return tierset.Build(tierset.Options{Limits: cfg.TierLimits()})
	}
	return append(out, runner.ServerSource(runner.ServerTier, runner.ServerConfig, serverTiers))
}

// corpusWith runs the corpus over the given tiers and, besides the
// default suites (the egress gateway, the output sanitiser), over suites
// (the tests add deliberately weakened ones).
func corpusWith(ctx context.Context, e *env, sources []runner.TierSource, suites ...runner.Suite) int {
	// The runner re-executes this program as `airlock corpus` with a marker
	// in the environment: that child runs one case and reports it.
	if runner.IsChild() {
		return runner.Child(sources, e.stdin, e.stdout, e.stderr, suites...)
	}
	c := commands["corpus"]
	fs := e.flags(c)
	tiers := fs.String("tiers", "", "comma-separated `TIERS` (default: every tier)")
	areas := fs.String("areas", "", "comma-separated `AREAS` (default: every area in corpus/)")
	cases := fs.String("cases", "", "comma-separated case `IDS` (default: every case)")
	timeout := fs.Duration("timeout", 60e9, "wall clock `DURATION` of one case's child; a child still running is killed (an escape for an attack)")
	memory := fs.Int64("memory", 8192, "address-space limit in `MB` (MiB) of children running in-process tiers (0: none)")
	parallel := fs.Int("parallel", 2, "`N` children at once")
	jsonMode := fs.Bool("json", false, "write the JSON report to stdout instead of the table")
	verbose := fs.Bool("verbose", false, "list every verdict, not only escapes and blocked benign cases")
	if code, ok := e.parseFlagsOnly(fs); !ok {
		return code
	}
	cfg := runner.NewConfig(sources, "corpus").WithSuites(append(runner.DefaultSuites(), suites...)...).
		WithTimeout(*timeout).WithMemoryMB(*memory).WithParallel(*parallel)
	if *tiers != "" {
		cfg = cfg.WithTiers(strings.Split(*tiers, ",")...)
	}
	if *cases != "" {
		cfg = cfg.WithCaseIDs(strings.Split(*cases, ",")...)
	}
	if *areas != "" {
		cfg = cfg.WithAreas(strings.Split(*areas, ",")...)
	}
	if root := runner.FindSource(); root != "" {
		mods, cleanup, err := runner.SourceModules(root)
		if err != nil {
			return e.fail(err)
		}
		defer cleanup()
		cfg = cfg.WithModules(mods)
	}
	last := -1
	cfg = cfg.WithProgress(func(done, total int, v runner.Verdict) {
		if pct := done * 10 / max(total, 1); pct != last || v.Result == runner.Escaped || v.Result == runner.BenignBlocked {
			last = pct
			fmt.Fprintf(e.stderr, "corpus: %d/%d %s on %s: %s\n", done, total, v.Case, v.Tier, v.Result)
		}
	})
	rep, err := runner.Run(ctx, cfg)
	if err != nil {
		return e.fail(fmt.Errorf("corpus: %w", err))
	}
	if *jsonMode {
		if err := rep.WriteJSON(e.stdout); err != nil {
			return e.fail(err)
		}
	} else {
		rep.WriteTable(e.stdout, *verbose)
	}
	if rep.Failed() {
		return exitFailed
	}
	return exitOK
}
