package starlark

import (
	"maps"

	sl "go.starlark.net/starlark"
)

// FileOptions is the tier's dialect, for running upstream with the same one.
var FileOptions = fileOptions

// Modules returns the tier's own modules (json, math, time, random).
func Modules() sl.StringDict { return modules() }

// NewHarnessTier builds a tier whose scripts also see extra as predeclared
// names, whose load() resolves mods before the job's files, and which calls
// onThread with each run's thread.
func NewHarnessTier(cfg Config, extra sl.StringDict, mods map[string]sl.StringDict, onThread func(*sl.Thread)) (*Tier, error) {
	t, err := New(cfg)
	if err != nil {
		return nil, err
	}
	base := maps.Clone(t.base)
	maps.Copy(base, extra)
	base.Freeze()
	t.base = base
	t.harness = &harness{modules: mods, thread: onThread}
	return t, nil
}
