package wasm

import (
	"errors"
	"fmt"
	"os"
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
		for _, name := range value.SortedKeys(f.files) {
			if err := m.put(name, []byte(f.files[name])); err != nil {
				return nil, closeAll, jobs.Invalid("files["+name+"]", "%s", err.Error())
			}
		}
		cfg = cfg.(sysfs.FSConfig).WithSysFSMount(m, "/")
		f.mem = m
	}
	for _, p := range f.read {
		r, err := hostpath.OpenRoot(p) // never through a link
		if err != nil {
			closeAll()
			if errors.Is(err, os.ErrNotExist) {
				return nil, func() {}, jobs.Invalid("grants.fs.read", "%s does not exist", p)
			}
			return nil, func() {}, jobs.Invalid("grants.fs.read", "%s: %v", p, err)
		}
		roots = append(roots, r)
		cfg = cfg.WithFSMount(r.FS(), p)
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
