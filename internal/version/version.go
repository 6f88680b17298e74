// Package version reports which airlock this binary is: the module version
// it was built as and, for a build from a checkout, the commit.
package version

import (
	"runtime/debug"
	"sync"
)

// String is the module version ("v0.3.0"), or for a build from a checkout
// "devel+<commit>" (with "-dirty" when the tree had changes), or "devel".
var String = sync.OnceValue(func() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	return fromBuildInfo(bi)
})

func fromBuildInfo(bi *debug.BuildInfo) string {
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if rev == "" {
		return "devel"
	}
	return "devel+" + rev[:min(12, len(rev))] + dirty
}
