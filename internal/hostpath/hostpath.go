// Package hostpath decides which host paths a job may be granted to read,
// and says what a granted path is, so that an approval binds what is
// mounted rather than the name the job wrote.
//
// A grant is resolved to the real path it names (every symbolic link
// followed, as the kernel sees it), and that real path must lie under one
// of the operator's roots and outside every path the server keeps for
// itself (and the siblings named after one with a suffix, such as the
// audit file's rotated files). Tiers then open the real path refusing any symbolic link, so a
// link swapped in after the check is never followed: on Linux with
// openat2's RESOLVE_NO_SYMLINKS, elsewhere one component at a time (see
// walk.go).
package hostpath

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/jobs"
)

// MaxContentDigest is the largest regular file whose content [Identity]
// hashes. Larger files are identified by device, inode, size and
// modification time only.
const MaxContentDigest = 1 << 20

// Roots are the host directories a caller may grant, and the paths
// refused even under them. The zero value allows nothing. A Roots is
// immutable.
type Roots struct {
	allow []string // real paths
	deny  []string // real paths where they exist, else cleaned absolute paths
}

// NewRoots resolves allow and deny. Each allowed root must exist and be
// absolute; a denied path need not exist yet (an audit file the server
// will create, say).
func NewRoots(allow, deny []string) (Roots, error) {
	var r Roots
	for _, p := range allow {
		if !filepath.IsAbs(p) {
			return Roots{}, fmt.Errorf("read root %q is not an absolute path", p)
		}
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			return Roots{}, fmt.Errorf("read root %s: %w", p, unwrapPath(err))
		}
		r.allow = append(r.allow, real)
	}
	for _, p := range deny {
		if p == "" {
			continue
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			return Roots{}, err
		}
		r.deny = append(r.deny, abs)
		if real, err := filepath.EvalSymlinks(abs); err == nil && real != abs {
			r.deny = append(r.deny, real)
		}
	}
	return r, nil
}

// Allowed returns the real paths of the roots.
func (r Roots) Allowed() []string { return append([]string(nil), r.allow...) }

// Resolve returns paths with each entry replaced by the real path it
// names. A path that does not exist is an invalid job; one whose real
// path lies outside every root, or under a path the server keeps, is
// refused as a denied filesystem capability naming the roots.
func (r Roots) Resolve(paths []string) ([]string, error) {
	if len(paths) == 0 {
		return paths, nil
	}
	out := make([]string, len(paths))
	for i, p := range paths {
		real, err := Real(p)
		if err != nil {
			return nil, jobs.Invalid("grants.fs.read", "%s: %s", p, unwrapPath(err))
		}
		shown := real
		if real != p {
			shown = real + " (named " + p + ")"
		}
		for _, d := range r.deny {
			// A kept path's suffixed siblings are kept too: the audit
			// file's rotated files (FILE.<time>), a key's backups.
			if within(real, d) || within(d, real) || strings.HasPrefix(real, d+".") {
				return nil, &airlock.Denied{Capability: "fs", Detail: "read " + shown + ": the server keeps " + d + " for itself"}
			}
		}
		ok := false
		for _, root := range r.allow {
			if within(real, root) {
				ok = true
				break
			}
		}
		if !ok {
			if len(r.allow) == 0 {
				return nil, &airlock.Denied{Capability: "fs", Detail: "read " + shown + ": no host path may be granted (no read roots)"}
			}
			return nil, &airlock.Denied{Capability: "fs", Detail: "read " + shown + ": outside the read roots [" + strings.Join(r.allow, " ") + "]"}
		}
		out[i] = real
	}
	return out, nil
}

// within reports whether p is dir or lies beneath it.
func within(p, dir string) bool {
	if dir == "/" {
		return true
	}
	return p == dir || strings.HasPrefix(p, dir+"/")
}

func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// fileIdentity is a regular file's identity: id (its type, device and
// inode), its size and the SHA-256 of its content, read from f, the file
// p names, up to MaxContentDigest bytes.
func fileIdentity(id, p string, f io.Reader) (string, error) {
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(f, MaxContentDigest+1))
	if err != nil {
		return "", err
	}
	if n > MaxContentDigest {
		return "", fmt.Errorf("%s grew while it was read", p)
	}
	return fmt.Sprintf("file %s size %d sha256 %s", id, n, hex.EncodeToString(h.Sum(nil))), nil
}

// ResolveFS resolves a job's read grants (Resolve) and rewrites
// grants.fs.at and grants.fs.copy to the real paths they now name, so
// every host path placed or copied is the one checked against the roots.
func (r Roots) ResolveFS(fs *airlock.FSGrant) error {
	named := fs.Read
	read, err := r.Resolve(named)
	if err != nil {
		return err
	}
	fs.Read = read
	if err := renameFSGrant(fs, named); err != nil {
		return err
	}
	placeAtNamed(fs, named)
	return nil
}

// systemGuestPaths are where a sandbox has its own mounts, or shows the
// host's system directories: a grant named there through a link stays at
// its real path.
var systemGuestPaths = []string{"/proc", "/sys", "/dev", "/tmp", "/scratch", "/.airlock", "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// placeAtNamed shows a read grant that was named through a symbolic link
// (fs.Read[i] is the real path named[i] led to) at the path it was named
// by, so that a program given the path the caller typed finds it there:
// grants.fs.at maps the real path, the one checked and mounted, to the
// named one. What is reachable does not change, only where it appears. A
// grant placed already, or also named by its real path, keeps its place;
// so does one whose named path lies under another grant or where the
// sandbox has its own mounts or system directories (systemGuestPaths).
// A host that shows the host's own tree (the process tier's filter level)
// resolves the named path through the link to the same real path.
func placeAtNamed(fs *airlock.FSGrant, named []string) {
	guests := map[string]bool{}
	for _, h := range fs.Read {
		guests[fs.GuestPath(h)] = true
	}
	for i, real := range fs.Read {
		n := filepath.Clean(named[i])
		if n == real || !filepath.IsAbs(n) || guests[n] || slices.Contains(named, real) {
			continue
		}
		if _, placed := fs.At[real]; placed {
			continue
		}
		inside := slices.ContainsFunc(systemGuestPaths, func(d string) bool { return within(n, d) }) || n == "/"
		for g := range guests {
			inside = inside || within(n, g) || within(g, n)
		}
		if inside {
			continue
		}
		if fs.At == nil {
			fs.At = map[string]string{}
		}
		fs.At[real] = n
		guests[n] = true
	}
}

// renameFSGrant rewrites grants.fs.at and grants.fs.copy to the real
// paths grants.fs.read now holds (named[i] became fs.Read[i]).
func renameFSGrant(fs *airlock.FSGrant, named []string) error {
	if len(fs.At) == 0 && len(fs.Copy) == 0 {
		return nil
	}
	real := make(map[string]string, len(named))
	for i, n := range named {
		real[n] = fs.Read[i]
	}
	at := make(map[string]string, len(fs.At))
	for h, g := range fs.At {
		r, ok := real[h]
		if !ok {
			return &airlock.InvalidJob{Field: "grants.fs.at", Reason: fmt.Sprintf("%q is not in grants.fs.read", h)}
		}
		if prev, dup := at[r]; dup && prev != g {
			return &airlock.InvalidJob{Field: "grants.fs.at", Reason: fmt.Sprintf("%s is named twice with different guest paths", r)}
		}
		at[r] = g
	}
	cp := make([]string, 0, len(fs.Copy))
	for _, h := range fs.Copy {
		r, ok := real[h]
		if !ok {
			return &airlock.InvalidJob{Field: "grants.fs.copy", Reason: fmt.Sprintf("%q is not in grants.fs.read", h)}
		}
		if !slices.Contains(cp, r) {
			cp = append(cp, r)
		}
	}
	if len(fs.At) > 0 {
		fs.At = at
	}
	if len(fs.Copy) > 0 {
		fs.Copy = cp
	}
	return nil
}
