package wasm

import (
	"errors"
	"io"
	"io/fs"
	"math"
	"path"
	"slices"
	"strings"
	"sync"

	"github.com/tetratelabs/wazero/experimental/sys"
	wsys "github.com/tetratelabs/wazero/sys"
)

// memFS is the writable scratch: a directory tree in memory, bounded in
// total bytes (file contents, plus nodeCost and the name for every file or
// directory, so that empty files cannot exhaust the host either). It has
// no symbolic or hard links, so nothing in it can point outside it.
type memFS struct {
	sys.UnimplementedFS
	mu    sync.Mutex
	root  *memNode
	limit int64
	used  int64
	ino   uint64
	mtime int64
}

type memNode struct {
	dir      bool
	children map[string]*memNode
	data     []byte
	mode     fs.FileMode
	ino      uint64
	mtim     int64
	atim     int64
	opens    int  // descriptors open on it
	gone     bool // removed while open: its contents stay charged until the last closes
}

// nodeCost is what a file or directory costs against the scratch's size,
// besides its name and contents.
const nodeCost = 256

// room is what a file's contents may still take of the scratch, besides
// its node and name.
func (m *memFS) room() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return max(m.limit-m.used-nodeCost, 0)
}

// charge reserves n bytes of the scratch, or reports it full.
func (m *memFS) charge(n int64) sys.Errno {
	if m.used+n > m.limit {
		return errNoSpace
	}
	m.used += n
	return 0
}

func newMemFS(limit, mtime int64) *memFS {
	m := &memFS{limit: limit, mtime: mtime}
	m.root = m.newNode(true, 0o755)
	return m
}

func (m *memFS) newNode(dir bool, perm fs.FileMode) *memNode {
	m.ino++
	n := &memNode{dir: dir, mode: perm & fs.ModePerm, ino: m.ino, mtim: m.mtime, atim: m.mtime}
	if dir {
		n.children = map[string]*memNode{}
		n.mode |= fs.ModeDir
	}
	return n
}

// split cleans a guest path ("." or "" for the root) into its elements.
// A trailing slash is dropped here; dirOnly keeps its meaning.
func split(p string) ([]string, sys.Errno) {
	p = strings.TrimSuffix(p, "/")
	if p == "" || p == "." || p == "/" {
		return nil, 0
	}
	// A descriptor opened as "." has the empty name, and wazero joins a
	// path from it as "/" + path: "/." is the root again.
	p = path.Clean(strings.TrimPrefix(p, "/"))
	if p == "." {
		return nil, 0
	}
	if !fs.ValidPath(p) {
		return nil, sys.EPERM
	}
	return strings.Split(p, "/"), 0
}

// dirOnly reports whether p ends in a slash, which makes it name a
// directory: on anything else POSIX (and WASI) answer ENOTDIR. wazero
// hands the file system cleaned paths and keeps a trailing slash.
func dirOnly(p string) bool { return strings.HasSuffix(p, "/") }

// lookup walks to p's node; with parent it returns p's directory and base
// name instead (the node itself may not exist).
func (m *memFS) lookup(p string) (*memNode, sys.Errno) {
	parts, errno := split(p)
	if errno != 0 {
		return nil, errno
	}
	n := m.root
	for _, el := range parts {
		if !n.dir {
			return nil, sys.ENOTDIR
		}
		c, ok := n.children[el]
		if !ok {
			return nil, sys.ENOENT
		}
		n = c
	}
	if !n.dir && dirOnly(p) {
		return nil, sys.ENOTDIR
	}
	return n, 0
}

func (m *memFS) parent(p string) (*memNode, string, sys.Errno) {
	parts, errno := split(p)
	if errno != 0 {
		return nil, "", errno
	}
	if len(parts) == 0 {
		return nil, "", sys.EINVAL // the root has no parent
	}
	dir, errno := m.lookup(strings.Join(parts[:len(parts)-1], "/"))
	if errno != 0 {
		return nil, "", errno
	}
	if !dir.dir {
		return nil, "", sys.ENOTDIR
	}
	return dir, parts[len(parts)-1], 0
}

// put places a job file, creating its directories.
// putDir makes the directory name and its parents, as put does for a
// file's parents.
func (m *memFS) putDir(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, err := m.mkdirs(strings.Split(name, "/"))
	return err
}

// mkdirs walks the path els from the root, making the directories that
// are missing, and returns the last one. The caller holds m.mu.
func (m *memFS) mkdirs(els []string) (*memNode, error) {
	n := m.root
	for _, el := range els {
		c, ok := n.children[el]
		if !ok {
			if m.charge(nodeCost+int64(len(el))) != 0 {
				return nil, errScratchFull
			}
			c = m.newNode(true, 0o755)
			n.children[el] = c
		}
		if !c.dir {
			return nil, sys.ENOTDIR
		}
		n = c
	}
	return n, nil
}

func (m *memFS) put(name string, data []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	parts := strings.Split(name, "/")
	n, err := m.mkdirs(parts[:len(parts)-1])
	if err != nil {
		return err
	}
	base := parts[len(parts)-1]
	if m.charge(nodeCost+int64(len(base))+int64(len(data))) != 0 {
		return errScratchFull
	}
	f := m.newNode(false, 0o644)
	f.data = append([]byte(nil), data...)
	n.children[base] = f
	return nil
}

func (m *memFS) OpenFile(p string, flag sys.Oflag, perm fs.FileMode) (sys.File, sys.Errno) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, errno := m.lookup(p)
	switch {
	case errno == sys.ENOENT && flag&sys.O_CREAT != 0 && dirOnly(p):
		return nil, sys.EISDIR // only a regular file can be created, and it cannot be named "x/"
	case errno == sys.ENOENT && flag&sys.O_CREAT != 0:
		dir, name, errno := m.parent(p)
		if errno != 0 {
			return nil, errno
		}
		if errno := m.charge(nodeCost + int64(len(name))); errno != 0 {
			return nil, errno
		}
		n = m.newNode(false, perm)
		dir.children[name] = n
	case errno != 0:
		return nil, errno
	case flag&sys.O_CREAT != 0 && flag&sys.O_EXCL != 0:
		return nil, sys.EEXIST
	}
	if flag&sys.O_DIRECTORY != 0 && !n.dir {
		return nil, sys.ENOTDIR
	}
	acc := flag & (sys.O_RDONLY | sys.O_RDWR | sys.O_WRONLY)
	if n.dir && acc != sys.O_RDONLY {
		return nil, sys.EISDIR
	}
	if flag&sys.O_TRUNC != 0 && !n.dir && acc != sys.O_RDONLY {
		m.used -= int64(len(n.data))
		n.data = nil
	}
	f := &memFile{fs: m, n: n, read: acc != sys.O_WRONLY, write: acc != sys.O_RDONLY, append: flag&sys.O_APPEND != 0}
	f.seekOp.f = f
	n.opens++
	return f, 0
}

func (m *memFS) Stat(p string) (wsys.Stat_t, sys.Errno) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, errno := m.lookup(p)
	if errno != 0 {
		return wsys.Stat_t{}, errno
	}
	return n.stat(), 0
}

func (m *memFS) Lstat(p string) (wsys.Stat_t, sys.Errno) { return m.Stat(p) }

func (m *memFS) Mkdir(p string, perm fs.FileMode) sys.Errno {
	m.mu.Lock()
	defer m.mu.Unlock()
	dir, name, errno := m.parent(p)
	if errno != 0 {
		return errno
	}
	if _, ok := dir.children[name]; ok {
		return sys.EEXIST
	}
	if errno := m.charge(nodeCost + int64(len(name))); errno != 0 {
		return errno
	}
	dir.children[name] = m.newNode(true, perm)
	return 0
}

func (m *memFS) Chmod(p string, perm fs.FileMode) sys.Errno {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, errno := m.lookup(p)
	if errno != 0 {
		return errno
	}
	n.mode = n.mode&^fs.ModePerm | perm&fs.ModePerm
	return 0
}

func (m *memFS) Rename(from, to string) sys.Errno {
	m.mu.Lock()
	defer m.mu.Unlock()
	fdir, fname, errno := m.parent(from)
	if errno != 0 {
		return errno
	}
	n, ok := fdir.children[fname]
	if !ok {
		return sys.ENOENT
	}
	if !n.dir && (dirOnly(from) || dirOnly(to)) {
		return sys.ENOTDIR
	}
	tdir, tname, errno := m.parent(to)
	if errno != 0 {
		return errno
	}
	old, replace := tdir.children[tname]
	if replace {
		switch {
		case old == n:
			return 0
		case old.dir && !n.dir:
			return sys.EISDIR
		case !old.dir && n.dir:
			return sys.ENOTDIR
		case old.dir && len(old.children) > 0:
			return sys.ENOTEMPTY
		}
	}
	if n.dir {
		// Refuse moving a directory into itself.
		for d := to; d != "." && d != "/" && d != ""; d = path.Dir(d) {
			if t, _ := m.lookup(d); t == n {
				return sys.EINVAL
			}
		}
	}
	// Nothing is given back or charged until the rename is sure to
	// happen; a longer name is charged like any other.
	if grow := int64(len(tname)) - int64(len(fname)); grow > 0 && m.used+grow > m.limit {
		return errNoSpace
	}
	if replace {
		m.drop(old, tname)
	}
	m.used += int64(len(tname)) - int64(len(fname))
	delete(fdir.children, fname)
	tdir.children[tname] = n
	return 0
}

func (m *memFS) Rmdir(p string) sys.Errno {
	return m.remove(p, true)
}

func (m *memFS) Unlink(p string) sys.Errno {
	return m.remove(p, false)
}

func (m *memFS) remove(p string, dir bool) sys.Errno {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, name, errno := m.parent(p)
	if errno != 0 {
		return errno
	}
	n, ok := d.children[name]
	switch {
	case !ok:
		return sys.ENOENT
	case !n.dir && dirOnly(p):
		return sys.ENOTDIR
	case dir && !n.dir:
		return sys.ENOTDIR
	case !dir && n.dir:
		return sys.EISDIR
	case dir && len(n.children) > 0:
		return sys.ENOTEMPTY
	}
	m.drop(n, name)
	delete(d.children, name)
	return 0
}

// drop gives back what n, named name, is charged as it leaves its
// directory; the contents of a file still open are given back when its
// last descriptor closes (until then they can still grow or shrink
// through it).
func (m *memFS) drop(n *memNode, name string) {
	m.used -= nodeCost + int64(len(name))
	if n.opens > 0 {
		n.gone = true
		return
	}
	m.used -= int64(len(n.data))
}

// The scratch has no links, so none can point out of it. Link and Symlink
// check their arguments as a host file system would (a missing source, an
// existing target, a missing or non-directory parent), so a guest sees the
// same error for a bad call, and refuse a valid one with EPERM, POSIX's
// answer for a file system that does not support links.

func (m *memFS) Link(oldPath, newPath string) sys.Errno {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, errno := m.lookup(oldPath); errno != 0 {
		return errno
	}
	return m.linkTarget(newPath)
}

func (m *memFS) Symlink(_, linkPath string) sys.Errno {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.linkTarget(linkPath)
}

// linkTarget checks the path a link would be created at.
func (m *memFS) linkTarget(p string) sys.Errno {
	if _, errno := m.lookup(strings.TrimSuffix(p, "/")); errno == 0 {
		return sys.EEXIST
	}
	if _, _, errno := m.parent(p); errno != 0 {
		return errno
	}
	if dirOnly(p) {
		return sys.ENOENT // a link is not a directory, so "link/" cannot name one
	}
	return sys.EPERM
}

// Readlink answers EINVAL for whatever exists: nothing is a link.
func (m *memFS) Readlink(p string) (string, sys.Errno) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, errno := m.lookup(p); errno != 0 {
		return "", errno
	}
	return "", sys.EINVAL
}

func (m *memFS) Utimens(p string, atim, mtim int64) sys.Errno {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, errno := m.lookup(p)
	if errno != 0 {
		return errno
	}
	n.setTimes(atim, mtim)
	return 0
}

func (n *memNode) setTimes(atim, mtim int64) {
	if atim != sys.UTIME_OMIT {
		n.atim = atim
	}
	if mtim != sys.UTIME_OMIT {
		n.mtim = mtim
	}
}

func (n *memNode) stat() wsys.Stat_t {
	return wsys.Stat_t{Ino: n.ino, Mode: n.mode, Nlink: 1, Size: int64(len(n.data)), Atim: n.atim, Mtim: n.mtim, Ctim: n.mtim}
}

// memFile is an open file or directory of a memFS.
type memFile struct {
	unimplemented
	seekOp[int64]
	fs          *memFS
	n           *memNode
	off         int64
	dirPos      int
	dirNames    []string // the directory's names, sorted when read from its start
	read, write bool
	append      bool
	closed      bool
}

func (f *memFile) Ino() (wsys.Inode, sys.Errno) { return f.n.ino, 0 }
func (f *memFile) IsDir() (bool, sys.Errno)     { return f.n.dir, 0 }
func (f *memFile) IsAppend() bool               { return f.append }
func (f *memFile) SetAppend(on bool) sys.Errno  { f.append = on; return 0 }
func (f *memFile) Sync() sys.Errno              { return 0 }
func (f *memFile) Datasync() sys.Errno          { return 0 }

func (f *memFile) Close() sys.Errno {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return 0
	}
	f.closed = true
	f.n.opens--
	if f.n.gone && f.n.opens == 0 {
		f.fs.used -= int64(len(f.n.data))
		f.n.data = nil
	}
	return 0
}

func (f *memFile) Stat() (wsys.Stat_t, sys.Errno) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	return f.n.stat(), 0
}

// usable checks a read or write (allowed says whether the file was opened
// for it) at offset or size n.
func (f *memFile) usable(allowed bool, n int64) sys.Errno {
	switch {
	case f.n.dir:
		return sys.EISDIR
	case !allowed:
		return sys.EBADF
	case n < 0:
		return sys.EINVAL
	}
	return 0
}

func (f *memFile) Read(buf []byte) (int, sys.Errno) {
	n, errno := f.Pread(buf, f.off)
	f.off += int64(n)
	return n, errno
}

func (f *memFile) Pread(buf []byte, off int64) (int, sys.Errno) {
	if errno := f.usable(f.read, off); errno != 0 {
		return 0, errno
	}
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if off >= int64(len(f.n.data)) {
		return 0, 0
	}
	return copy(buf, f.n.data[off:]), 0
}

// unimplemented puts wazero's ENOSYS defaults one level deeper than
// seekOp, so that seekOp's Seek is the one promoted.
type unimplemented struct{ sys.UnimplementedFile }

// seekOp provides memFile's Seek. It is generic only so that go vet's
// stdmethods check, which wants every Seek to be io.Seeker's, does not
// flag a method whose signature wazero's sys.File dictates.
type seekOp[O ~int64] struct{ f *memFile }

func (s seekOp[O]) Seek(offset O, whence int) (O, sys.Errno) {
	n, errno := s.f.seek(int64(offset), whence)
	return O(n), errno
}

func (f *memFile) seek(offset int64, whence int) (int64, sys.Errno) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.n.dir {
		if offset == 0 && whence == io.SeekStart {
			f.dirPos = 0
			return 0, 0
		}
		return 0, sys.EISDIR
	}
	var base int64
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		base = f.off
	case io.SeekEnd:
		base = int64(len(f.n.data))
	default:
		return 0, sys.EINVAL
	}
	if base+offset < 0 {
		return 0, sys.EINVAL
	}
	f.off = base + offset
	return f.off, 0
}

func (f *memFile) Readdir(n int) ([]sys.Dirent, sys.Errno) {
	if !f.n.dir {
		return nil, sys.EBADF
	}
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	// The names are sorted once per pass over the directory, not once per
	// batch a guest reads: a pass sees the entries there at its start,
	// less those removed since.
	if f.dirPos == 0 || f.dirNames == nil {
		f.dirNames = make([]string, 0, len(f.n.children))
		for name := range f.n.children {
			f.dirNames = append(f.dirNames, name)
		}
		slices.Sort(f.dirNames)
	}
	var out []sys.Dirent
	for f.dirPos < len(f.dirNames) && (n < 0 || len(out) < n) {
		name := f.dirNames[f.dirPos]
		f.dirPos++
		if c, ok := f.n.children[name]; ok {
			out = append(out, sys.Dirent{Ino: c.ino, Name: name, Type: c.mode.Type()})
		}
	}
	return out, 0
}

func (f *memFile) Write(buf []byte) (int, sys.Errno) {
	if f.append {
		f.fs.mu.Lock()
		f.off = int64(len(f.n.data))
		f.fs.mu.Unlock()
	}
	n, errno := f.Pwrite(buf, f.off)
	f.off += int64(n)
	return n, errno
}

func (f *memFile) Pwrite(buf []byte, off int64) (int, sys.Errno) {
	if errno := f.usable(f.write, off); errno != 0 {
		return 0, errno
	}
	if int64(len(buf)) > math.MaxInt64-off {
		return 0, errNoSpace // its end is past any offset
	}
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	end := off + int64(len(buf))
	if grow := end - int64(len(f.n.data)); grow > 0 {
		if f.fs.used+grow > f.fs.limit {
			return 0, errNoSpace
		}
		f.fs.used += grow
		f.n.data = append(f.n.data, make([]byte, grow)...)
	}
	copy(f.n.data[off:], buf)
	return len(buf), 0
}

func (f *memFile) Truncate(size int64) sys.Errno {
	if errno := f.usable(f.write, size); errno != 0 {
		return errno
	}
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	grow := size - int64(len(f.n.data))
	if grow > 0 && f.fs.used+grow > f.fs.limit {
		return errNoSpace
	}
	f.fs.used += grow
	if grow > 0 {
		f.n.data = append(f.n.data, make([]byte, grow)...)
	} else {
		// A copy, not a reslice: what is given back must be freed, or
		// files truncated after a write keep memory nothing counts.
		f.n.data = slices.Clone(f.n.data[:size])
	}
	return 0
}

func (f *memFile) Utimens(atim, mtim int64) sys.Errno {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	f.n.setTimes(atim, mtim)
	return 0
}

// errNoSpace is what a write past the scratch's size returns: WASI
// preview 1 as wazero implements it has no ENOSPC, so the guest sees EIO.
const errNoSpace = sys.EIO

// errScratchFull is put's error when the job's files do not fit.
var errScratchFull = errors.New("the job's files do not fit in the scratch (grants.fs.scratch_mb)")

var (
	_ sys.FS   = (*memFS)(nil)
	_ sys.File = (*memFile)(nil)
)
