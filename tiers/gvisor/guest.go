package gvisor

import (
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/jobs"
)

// checkGuests refuses a read grant whose guest path is, in the sandbox, a
// file where the grant is a directory or the other way round: runsc
// cannot mount it there, and fails the sandbox's start with a message of
// its own. What lies at the guest path is worked out from the root (or
// the host directory or grant mounted over it), following links inside
// it; where that cannot be told, runsc's own check stands.
func (b *bundle) checkGuests() error {
	for _, h := range b.grants.Read {
		g := b.grants.GuestPath(h)
		if g == h && !b.image {
			continue // at its host path, over the host view's own
		}
		hst, err := os.Stat(h)
		if err != nil {
			continue // reported by the run's own checks
		}
		gst, ok := b.guestStat(g, h)
		if ok && gst.IsDir() != hst.IsDir() {
			kind := map[bool]string{true: "a directory", false: "a file"}
			return jobs.Invalid("grants.fs.at", "%s is %s, but guest path %s is %s in the sandbox", h, kind[hst.IsDir()], g, kind[gst.IsDir()])
		}
	}
	return nil
}

// guestStat describes what is at guest path g before the grant host is
// mounted there: in the closest mount holding g (another grant, a host
// directory of the host view) or in the root.
func (b *bundle) guestStat(g, host string) (os.FileInfo, bool) {
	base, rel := b.rootfs, g
	best := ""
	consider := func(dst, src string) {
		if dst != g && strings.HasPrefix(g, strings.TrimSuffix(dst, "/")+"/") && len(dst) > len(best) {
			best, base, rel = dst, src, strings.TrimPrefix(g, dst)
		}
	}
	for _, d := range b.hostDirs {
		consider(d, d)
	}
	for _, h := range b.grants.Read {
		if h != host {
			consider(b.grants.GuestPath(h), h)
		}
	}
	p, ok := resolveIn(base, rel)
	if !ok {
		return nil, false
	}
	st, err := os.Stat(p)
	return st, err == nil
}

// resolveIn resolves rel inside base as if base were the root: links are
// followed, an absolute target from base. A missing name ends it there
// (the path it would have); it gives up (false) on a loop or an error
// other than a missing name (see resolveMissing).
func resolveIn(base, rel string) (string, bool) {
	at, rest, ok := resolveMissing(base, rel)
	if !ok {
		return "", false
	}
	if len(rest) > 0 {
		at = path.Join(at, rest[0])
	}
	return filepath.Join(base, at), true
}
