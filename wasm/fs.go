package wasm

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/experimental/sys"
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
	open := &openFiles{}
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
		cfg = cfg.(sysfs.FSConfig).WithSysFSMount(limitFS{m, open}, "/")
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
		cfg = cfg.(sysfs.FSConfig).WithSysFSMount(limitFS{&sysfs.AdaptFS{FS: othersFS{r}}, open}, guestPath(f.at, p))
	}
	return cfg, closeAll, nil
}

// maxOpenFiles bounds the files and directories a run holds open at
// once, in all its mounts: each open one is memory, and each one in a read
// grant is a descriptor of the airlock process, whose table the guest
// must not be able to fill.
const maxOpenFiles = 1024

// openFiles counts a run's open files.
type openFiles struct {
	mu sync.Mutex
	n  int
}

func (o *openFiles) release() {
	o.mu.Lock()
	o.n--
	o.mu.Unlock()
}

// limitFS is a mount whose opens count against the run's maxOpenFiles;
// one more answers EAGAIN (WASI preview 1 as wazero implements it has no
// EMFILE).
type limitFS struct {
	sys.FS
	open *openFiles
}

func (l limitFS) OpenFile(p string, flag sys.Oflag, perm fs.FileMode) (sys.File, sys.Errno) {
	l.open.mu.Lock()
	if l.open.n >= maxOpenFiles {
		l.open.mu.Unlock()
		return nil, sys.EAGAIN
	}
	l.open.n++
	l.open.mu.Unlock()
	f, errno := l.FS.OpenFile(p, flag, perm)
	if errno != 0 {
		l.open.release()
		return nil, errno
	}
	return &limitFile{File: f, open: l.open}, 0
}

// limitFile gives its place back when closed.
type limitFile struct {
	sys.File
	open   *openFiles
	closed bool
}

func (f *limitFile) Close() sys.Errno {
	if !f.closed {
		f.closed = true
		f.open.release()
	}
	return f.File.Close()
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
		if !d.IsDir() && !d.Type().IsRegular() {
			return nil // links, devices, sockets: not copied
		}
		info, err := d.Info()
		if err != nil {
			return jobs.Invalid("grants.fs.copy", "copying %s: %v", host, err)
		}
		switch {
		case p == "." && !othersMay(info.Mode()):
			return jobs.Invalid("grants.fs.copy", "%s: the job could not list it, so it cannot be copied", host)
		case !othersMay(info.Mode()) && d.IsDir():
			return fs.SkipDir // what the job could not read is left out
		case !othersMay(info.Mode()):
			return nil
		}
		var perr error
		if d.IsDir() {
			if name := join(p); name != "" {
				perr = m.putDir(name)
			}
		} else {
			// Read no more than still fits: a huge file must not be
			// read into memory only to be refused.
			var data []byte
			if data, perr = readAtMost(r, p, m.room()); perr == nil {
				perr = m.put(join(p), data)
			} else if !errors.Is(perr, errScratchFull) {
				return jobs.Invalid("grants.fs.copy", "copying %s: %v", host, perr)
			}
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

// readAtMost reads the file name of r, or fails with errScratchFull if
// it holds more than n bytes.
func readAtMost(r *os.Root, name string, n int64) ([]byte, error) {
	f, err := r.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0) // as othersFS.Open
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	switch {
	case err != nil:
		return nil, err
	case !st.Mode().IsRegular():
		return nil, fmt.Errorf("%s is no longer a regular file", name)
	case st.Size() > n:
		return nil, errScratchFull
	}
	data, err := io.ReadAll(io.LimitReader(f, n+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > n {
		return nil, errScratchFull
	}
	return data, nil
}

// othersMay reports whether a user with no claim on a file (neither its
// owner nor in its group) may read it, and enter it if it is a directory.
// That is what the OS tiers' unprivileged sandbox users may do with a
// grant, so a WASM job sees the same of it, whichever user airlock runs
// as.
func othersMay(m fs.FileMode) bool {
	want := fs.FileMode(0o004)
	if m.IsDir() {
		want = 0o005
	}
	return m.Perm()&want == want
}

// othersFS is a read grant as the job sees it: what othersMay allows,
// each directory on the way entered only if others may enter it.
type othersFS struct{ root *os.Root }

func (o othersFS) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	denied := &fs.PathError{Op: "open", Path: name, Err: syscall.EACCES}
	if name != "." {
		dir := "."
		for _, part := range strings.Split(path.Dir(name), "/") {
			if part != "." {
				dir = path.Join(dir, part)
			}
			st, err := o.root.Stat(dir)
			if err != nil {
				return nil, &fs.PathError{Op: "open", Path: name, Err: err}
			}
			if st.Mode().Perm()&0o001 == 0 {
				return nil, denied
			}
		}
	}
	// O_NONBLOCK: opening a named pipe would otherwise wait for a writer,
	// in a system call the run's wall clock cannot interrupt. Only regular
	// files and directories are shown; a pipe, socket or device in a grant
	// is not (it could block a read the same way, or reach the host).
	f, err := o.root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil || !othersMay(st.Mode()) || !(st.Mode().IsRegular() || st.IsDir()) {
		f.Close()
		return nil, denied
	}
	return f, nil
}
