package gvisor

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// Sandbox roots.
//
// The root of the host view holds empty mount points for the host's
// program directories (or the links the host has), the sandbox's own
// mount points, placeholders the agent's binaries are mounted over, a few
// files in /etc and perhaps a loader cache (ldcache.go). Every tier of a
// directory with the same host directories builds the same one, and
// building it is a dozen or so file-system writes: on a slow disk several
// milliseconds per tier, which a CLI run pays each time. So a root is
// named after a digest of exactly what it holds, roots/shared-<digest>,
// and tiers share it:
//
//   - It is built once, in the builder's own directory (roots/<owner>,
//     which a sweep removes if the builder dies), and renamed into place;
//     it is never written again, so no sandbox mapping one of its files
//     ever sees that file change (see owner.go).
//   - A tier holds a shared flock on its root's directory for its life.
//   - A sweep removes a shared root other than its own only under an
//     exclusive flock, which it cannot take while any live tier uses the
//     root. It renames the root away before removing it, and a tier that
//     opened it just before checks, once it holds its lock, that the name
//     still leads to what it locked, or looks again.
//
// A root whose digest is current stays when its last tier closes: the next
// tier (the next CLI run) finds it ready.
const sharedRootPrefix = "shared-"

// rootEntry is one thing in a root: a directory, a file or a link.
type rootEntry struct {
	path string // relative to the root, slash-separated, parents first
	kind byte   // 'd', 'f' or 'l'
	data string // a file's content or a link's target
}

// rootPlan is what a root for hostDirs holds, and the host directories
// a sandbox bind-mounts into it.
func rootPlan(hostDirs []string) (entries []rootEntry, mounts []string, err error) {
	dir := func(p string) { entries = append(entries, rootEntry{path: p, kind: 'd'}) }
	for _, d := range []string{"proc", "dev", "sys", "tmp", "etc", "scratch", ".airlock", ".airlock/sock"} {
		dir(d)
	}
	// The agent's and the exec guard's binaries are bind-mounted over
	// files: made here, so runsc never writes the shared root.
	for _, bin := range []string{agentBin, guardBin} {
		entries = append(entries, rootEntry{path: strings.TrimPrefix(bin, "/"), kind: 'f'})
	}
	made := map[string]bool{}
	for _, d := range hostDirs {
		st, err := os.Lstat(d)
		if err != nil {
			continue
		}
		rel := strings.TrimPrefix(filepath.Clean(d), "/")
		if rel == "" || rel == "." {
			continue
		}
		// The parents of a nested host directory (/usr/local/bin, say).
		for i := range rel {
			if rel[i] == '/' && !made[rel[:i]] {
				made[rel[:i]] = true
				dir(rel[:i])
			}
		}
		switch {
		case st.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(d)
			if err != nil {
				return nil, nil, err
			}
			entries = append(entries, rootEntry{path: rel, kind: 'l', data: target})
		case st.IsDir():
			if !made[rel] {
				made[rel] = true
				dir(rel)
			}
			mounts = append(mounts, d)
		}
	}
	etc := map[string]string{ // etcFiles
		"passwd":      "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/scratch:/bin/sh\n",
		"group":       "root:x:0:\nnogroup:x:65534:\n",
		"hosts":       "127.0.0.1\tlocalhost airlock\n::1\tlocalhost\n",
		"hostname":    "airlock\n",
		"resolv.conf": "nameserver 127.0.0.1\n", // the egress forwarder, when the job has a net grant
	}
	if cache, ok := ldCache(hostDirs); ok {
		etc["ld.so.cache"] = cache
	}
	names := make([]string, 0, len(etc))
	for name := range etc {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		entries = append(entries, rootEntry{path: "etc/" + name, kind: 'f', data: etc[name]})
	}
	return entries, mounts, nil
}

// rootMode is the mode of a root's top directory: the job may list /.
const rootMode = 0o755

// rootDigest names a root by what it holds.
func rootDigest(entries []rootEntry) string {
	h := sha256.New()
	fmt.Fprintf(h, "root %o\n", rootMode)
	for _, e := range entries {
		fmt.Fprintf(h, "%c %d %s %d\n", e.kind, len(e.path), e.path, len(e.data))
		_, _ = io.WriteString(h, e.data)
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
}

// buildRoot writes entries into dir, a new empty directory, with their
// modes set whatever the umask: the sandbox's user must read the root, and
// every tier of the directory uses it as built.
func buildRoot(dir string, entries []rootEntry) error {
	if err := os.Chmod(dir, rootMode); err != nil {
		return err
	}
	for _, e := range entries {
		p := filepath.Join(dir, filepath.FromSlash(e.path))
		mode := os.FileMode(0o644)
		var err error
		switch e.kind {
		case 'd':
			mode = 0o755
			err = os.Mkdir(p, mode)
		case 'l':
			if err = os.Symlink(e.data, p); err == nil {
				continue
			}
		default:
			if e.data == "" { // the agent's placeholders
				mode = 0o755
			}
			err = os.WriteFile(p, []byte(e.data), mode)
		}
		if err == nil {
			err = os.Chmod(p, mode)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// openRoot finds or builds the shared root for entries in roots, building
// it in own (the tier's own directory there), and returns its path, locked
// shared by the returned file, which keeps the lock until it is closed.
func openRoot(roots, own string, entries []rootEntry) (string, *os.File, error) {
	path := filepath.Join(roots, sharedRootPrefix+rootDigest(entries))
	for range 8 {
		f, err := os.Open(path)
		if errors.Is(err, os.ErrNotExist) {
			if err := placeRoot(own, path, entries); err != nil {
				return "", nil, err
			}
			continue
		}
		if err != nil {
			return "", nil, err
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH); err != nil {
			f.Close()
			return "", nil, fmt.Errorf("locking the sandbox root: %w", err)
		}
		// A sweep may have taken the root away between the open and the
		// lock: then the name leads elsewhere, or nowhere.
		a, err1 := f.Stat()
		b, err2 := os.Stat(path)
		if err1 == nil && err2 == nil && os.SameFile(a, b) {
			return path, f, nil
		}
		f.Close()
	}
	return "", nil, errors.New("the shared sandbox root keeps disappearing")
}

// placeRoot builds a root in own and renames it to path; if another tier
// placed one first, that one stays.
func placeRoot(own, path string, entries []rootEntry) error {
	tmp := filepath.Join(own, "build")
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if err := os.MkdirAll(tmp, 0o711); err != nil {
		return err
	}
	if err := buildRoot(tmp, entries); err != nil {
		_ = os.RemoveAll(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.RemoveAll(tmp)
		if errors.Is(err, os.ErrExist) || errors.Is(err, syscall.ENOTEMPTY) {
			return nil
		}
		return err
	}
	return nil
}

// sweepRoots removes the shared roots in roots that no live tier uses,
// other than keep (this tier's), through own (this tier's own directory
// there), and returns how many it removed.
func sweepRoots(roots, keep, own string) (removed int) {
	entries, _ := os.ReadDir(roots)
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, sharedRootPrefix) || filepath.Join(roots, name) == keep {
			continue
		}
		path := filepath.Join(roots, name)
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
			f.Close() // in use
			continue
		}
		// Renamed under the lock, so that a tier that opened it before
		// finds the name gone once it gets its own lock, into this tier's
		// own directory, which a later sweep removes if this one dies
		// half-way.
		dead := filepath.Join(own, "gone-"+name)
		err = os.MkdirAll(own, 0o711)
		if err == nil {
			err = os.Rename(path, dead)
		}
		f.Close()
		if err == nil {
			err = os.RemoveAll(dead)
		}
		if err != nil {
			logf("sweep: removing sandbox root %s: %v", name, err)
			continue
		}
		removed++
	}
	return removed
}
