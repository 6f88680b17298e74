package wasm

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/experimental/sysfs"

	"github.com/airlock-sandbox/airlock/internal/hostpath"
	"github.com/airlock-sandbox/airlock/internal/jobs"
	"github.com/airlock-sandbox/airlock/internal/value"
)

// fsSpec is the filesystem a run sees: host directories mounted read-only
// at their own paths, and (when wanted) an in-memory scratch at "/", the
// guest's working directory, holding the job's files.
type fsSpec struct {
	read       []string
	at         map[string]string // read grant → guest path (absent: its own path)
	copy       []string          // read grants loaded into the scratch, writable
	scratch    bool
	scratchMax int64
	files      map[string]string
	mtime      int64  // the job's clock, for the scratch's timestamps
	mem        *memFS // the scratch config made, read back for collect
}

// config builds wazero's FS config. Read-only grants are opened as
// [os.Root]s: a guest path that leaves the directory — by "..", or through
// a symbolic link, relative or absolute — fails inside the kernel-checked
// root rather than in a prefix check. Nothing is ever mounted writable: the
// only writable place is the scratch, which lives in memory.
func (f *fsSpec) config() (wazero.FSConfig, func(), error) {
	cfg := wazero.NewFSConfig()
	var roots []*os.Root
	closeAll := func() {
		for _, r := range roots {
			_ = r.Close()
		}
	}
	if f.scratch {
		m := newMemFS(f.scratchMax, f.mtime)
		for _, p := range f.copy {
			if err := copyGrant(m, p, guestPath(f.at, p)); err != nil {
				return nil, closeAll, err
			}
		}
		for _, name := range value.SortedKeys(f.files) {
			if err := m.put(name, []byte(f.files[name])); err != nil {
				return nil, closeAll, jobs.Invalid("files["+name+"]", "%s", err.Error())
			}
		}
		cfg = cfg.(sysfs.FSConfig).WithSysFSMount(m, "/")
		f.mem = m
	}
	for _, p := range f.read {
		if slices.Contains(f.copy, p) {
			continue // in the scratch
		}
		r, err := hostpath.OpenRoot(p) // never through a link
		if err != nil {
			closeAll()
			if errors.Is(err, os.ErrNotExist) {
				return nil, func() {}, jobs.Invalid("grants.fs.read", "%s does not exist", p)
			}
			return nil, func() {}, jobs.Invalid("grants.fs.read", "%s: %v", p, err)
		}
		roots = append(roots, r)
		cfg = cfg.WithFSMount(r.FS(), guestPath(f.at, p))
	}
	return cfg, closeAll, nil
}

// checkReadGrant refuses read grants the tier will not expose whatever the
// job says: /proc and /sys describe the host process itself (its
// environment, its memory), and "/" would expose both.
func checkReadGrant(p string) error {
	for _, bad := range []string{"/proc", "/sys", "/dev"} {
		if p == "/" || p == bad || strings.HasPrefix(p, bad+"/") {
			return fmt.Errorf("read grant %s would expose the host process (/, /proc, /sys and /dev are never mounted)", p)
		}
	}
	return nil
}

func guestPath(at map[string]string, host string) string {
	if g, ok := at[host]; ok {
		return g
	}
	return host
}

// copyGrant loads the host directory into the scratch at guest: regular
// files and directories, through an [os.Root] so nothing outside it is
// read. Links are not copied (the scratch has none), so a link inside the
// grant that points out of it leads nowhere.
func copyGrant(m *memFS, host, guest string) error {
	r, err := hostpath.OpenRoot(host)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return jobs.Invalid("grants.fs.read", "%s does not exist", host)
		}
		return jobs.Invalid("grants.fs.read", "%s: %v", host, err)
	}
	defer r.Close()
	base := strings.TrimPrefix(guest, "/")
	join := func(p string) string {
		switch {
		case p == ".":
			return base
		case base == "":
			return p
		}
		return base + "/" + p
	}
	return fs.WalkDir(r.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return jobs.Invalid("grants.fs.copy", "copying %s: %v", host, err)
		}
		var perr error
		switch {
		case d.IsDir():
			if name := join(p); name != "" {
				perr = m.putDir(name)
			}
		case d.Type().IsRegular():
			data, err := fs.ReadFile(r.FS(), p)
			if err != nil {
				return jobs.Invalid("grants.fs.copy", "copying %s: %v", host, err)
			}
			perr = m.put(join(p), data)
		default:
			return nil // links, devices, sockets: not copied
		}
		if errors.Is(perr, errScratchFull) {
			return jobs.Invalid("grants.fs.copy", "%s does not fit in the scratch (grants.fs.scratch_mb, %d MB)", host, m.limit>>20)
		}
		if perr != nil {
			return jobs.Invalid("grants.fs.copy", "copying %s to %s: %v", host, guest, perr)
		}
		return nil
	})
}
