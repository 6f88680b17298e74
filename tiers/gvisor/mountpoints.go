package gvisor

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/airlock-sandbox/airlock/internal/jobs"
)

// Mount points.
//
// runsc's gofer makes a bind mount's missing mount point itself, on the
// host, as root, before the sandbox starts: in a shared image's root (where
// every later job of every tenant would see it), or through a bind of the
// host's own /usr in the host view. So the tier makes sure every mount
// point exists before runsc runs:
//
//   - one missing in the root gets the sandbox a root of its own, built in
//     the sandbox's directory: a skeleton holding, along the way to each
//     missing mount point, the root's entries, each directory and file
//     bound read-only from the root and each link copied, and the missing
//     directories themselves (see skeleton);
//   - one missing in a host directory or another grant is refused: that
//     is the host's.
//
// Mount points in what the sentry makes itself (/tmp, /dev, /proc) are
// made in the sandbox's memory and need nothing.

// maxSkeletonBinds bounds the binds a skeleton may need: each is a mount
// runsc's gofer makes at start. A guest path deep in a crowded directory
// (/usr/lib/x) is refused rather than start hundreds.
const maxSkeletonBinds = 96

// placeMountPoints checks the spec's mount points and, where one is missing
// in the root, builds a skeleton root in dir/root and returns the spec with
// it as its root and its binds first. A spec whose mount points all exist
// is returned as it is.
func placeMountPoints(s *specs.Spec, dir string) (*specs.Spec, error) {
	base := s.Root.Path
	var missing []missingPoint
	for i, m := range s.Mounts {
		holder := -1
		for j := range i {
			if d := s.Mounts[j].Destination; strings.HasPrefix(m.Destination, strings.TrimSuffix(d, "/")+"/") &&
				(holder < 0 || len(d) > len(s.Mounts[holder].Destination)) {
				holder = j
			}
		}
		if holder >= 0 {
			h := s.Mounts[holder]
			if h.Type != "bind" {
				continue // a file system the sentry makes: the point is made in memory
			}
			rel := strings.TrimPrefix(m.Destination, strings.TrimSuffix(h.Destination, "/"))
			if _, rest, ok := resolveMissing(h.Source, rel); ok && len(rest) > 0 {
				return nil, jobs.Invalid("grants.fs.at", "guest path %s does not exist in %s, which the sandbox shows from the host's %s: choose a guest path that exists there, or one outside it", m.Destination, h.Destination, h.Source)
			}
			continue
		}
		at, rest, ok := resolveMissing(base, m.Destination)
		if !ok || len(rest) == 0 {
			continue // there (or runsc's own error stands)
		}
		file := false
		if st, err := os.Stat(m.Source); err == nil && m.Type == "bind" && !st.IsDir() {
			file = true
		}
		missing = append(missing, missingPoint{at: at, rest: rest, file: file})
	}
	if len(missing) == 0 {
		return s, nil
	}
	dests := map[string]bool{}
	for _, m := range s.Mounts {
		dests[path.Clean(m.Destination)] = true
	}
	sk := &skeleton{base: base, root: filepath.Join(dir, "root"), dests: dests, along: map[string]bool{"/": true}}
	for _, p := range missing {
		for d := p.at; d != "/"; d = path.Dir(d) {
			sk.along[d] = true
		}
	}
	if err := sk.build(missing); err != nil {
		return nil, err
	}
	out := *s
	out.Root = &specs.Root{Path: sk.root, Readonly: s.Root.Readonly}
	out.Mounts = append(sk.binds, s.Mounts...)
	return &out, nil
}

// missingPoint is a mount point missing in the root: at is the deepest
// directory on its way that exists (a guest path, links resolved), rest
// the names below it, file whether the point is a file.
type missingPoint struct {
	at   string
	rest []string
	file bool
}

// resolveMissing resolves guest path rel inside base as if base were the
// root (links followed, an absolute target from base) and returns the
// deepest existing directory on the way (a guest path) and the names below
// it that do not exist. ok is false where that cannot be
// told (a loop, an error other than a missing name, a file on the way).
func resolveMissing(base, rel string) (at string, rest []string, ok bool) {
	parts := strings.Split(strings.Trim(path.Clean("/"+rel), "/"), "/")
	cur := "/"
	for links := 0; len(parts) > 0; {
		name := parts[0]
		if name == "" || name == "." {
			parts = parts[1:]
			continue
		}
		next := path.Join(cur, name)
		fi, err := os.Lstat(filepath.Join(base, next))
		if os.IsNotExist(err) {
			return cur, parts, true
		}
		if err != nil {
			return "", nil, false
		}
		parts = parts[1:]
		if fi.Mode()&os.ModeSymlink == 0 {
			if !fi.IsDir() && len(parts) > 0 {
				return "", nil, false
			}
			cur = next
			continue
		}
		if links++; links > 40 {
			return "", nil, false
		}
		target, err := os.Readlink(filepath.Join(base, next))
		if err != nil {
			return "", nil, false
		}
		if !path.IsAbs(target) {
			target = path.Join(cur, target)
		}
		parts = append(strings.Split(strings.Trim(path.Clean(target), "/"), "/"), parts...)
		cur = "/"
	}
	return cur, nil, true
}

// skeleton is a sandbox's own root: the directories along the way to the
// missing mount points are made in it, everything else of base is bound
// (or, for links, copied) from base.
type skeleton struct {
	base, root string
	dests      map[string]bool // the spec's mount points
	along      map[string]bool // existing directories on the way to a missing point
	binds      []specs.Mount
}

func (sk *skeleton) build(missing []missingPoint) error {
	if err := sk.dir("/"); err != nil {
		return err
	}
	for _, p := range missing {
		cur := p.at
		for i, name := range p.rest {
			cur = path.Join(cur, name)
			host := filepath.Join(sk.root, cur)
			var err error
			if i == len(p.rest)-1 && p.file {
				var f *os.File
				if f, err = os.OpenFile(host, os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
					err = f.Close()
				}
			} else if err = os.Mkdir(host, 0o755); os.IsExist(err) {
				err = nil
			}
			if err != nil {
				return fmt.Errorf("making mount point %s: %w", cur, err)
			}
		}
	}
	return nil
}

// dir makes guest directory d in the skeleton with base's mode and fills
// it from base.
func (sk *skeleton) dir(d string) error {
	src := filepath.Join(sk.base, d)
	st, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("sandbox root: %w", err)
	}
	dst := filepath.Join(sk.root, d)
	if err := os.Mkdir(dst, 0o700); err != nil {
		return fmt.Errorf("sandbox root: %w", err)
	}
	if err := os.Chmod(dst, st.Mode().Perm()); err != nil {
		return err
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		return fmt.Errorf("sandbox root: %w", err)
	}
	for _, e := range entries {
		g := path.Join(d, e.Name())
		if sk.along[g] && e.IsDir() {
			if err := sk.dir(g); err != nil {
				return err
			}
			continue
		}
		if err := sk.entry(g, e.Type()); err != nil {
			return err
		}
	}
	return nil
}

// entry places guest path g, of type t in base, in the skeleton: a link
// copied, a directory or file made and bound from base (or left empty,
// where the spec mounts something over it).
func (sk *skeleton) entry(g string, t os.FileMode) error {
	src, dst := filepath.Join(sk.base, g), filepath.Join(sk.root, g)
	switch {
	case t&os.ModeSymlink != 0:
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		return os.Symlink(target, dst)
	case t.IsDir():
		if err := os.Mkdir(dst, 0o755); err != nil {
			return err
		}
	case t.IsRegular():
		f, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		f.Close()
	default:
		return nil // a device, socket or pipe: not shown
	}
	if sk.dests[g] {
		return nil // the spec mounts over it
	}
	if len(sk.binds) == maxSkeletonBinds {
		return jobs.Invalid("grants.fs.at", "a mount point missing in the sandbox's root lies in a directory too crowded to rebuild around it (over %d entries on the way): choose a guest path whose parent exists, or one in a less crowded directory", maxSkeletonBinds)
	}
	sk.binds = append(sk.binds, roBind(src, g))
	return nil
}
