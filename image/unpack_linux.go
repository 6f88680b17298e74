package image

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// The unpacker applies layers to a root it opened itself. Every path is
// resolved one component at a time from the root's descriptor with
// O_NOFOLLOW, so no entry (a "..", an absolute name, a name through a
// symlink an earlier entry made) reaches outside the root: a symlink on the
// way is refused, never followed. Only regular files, directories, symlinks
// and hard links to files already in the root are made; device nodes and
// fifos are dropped; set-id and sticky bits, write for the group and
// others, owners and xattrs are not applied.

// errTooLarge and errHostile mark refusals that are the image's fault;
// errBusy one that is the store's (see sharedBudget).
var (
	errTooLarge = errors.New("too large")
	errHostile  = errors.New("refused entry")
	errBusy     = errors.New("the store is busy")
)

// sharedBudget is what the unpackers of one store write in all while they
// run: each takes what it writes and gives it back when it is done.
type sharedBudget struct {
	used atomic.Int64
	max  int64
}

func (b *sharedBudget) take(n int64) bool {
	if b == nil {
		return true
	}
	if b.used.Add(n) > b.max {
		b.used.Add(-n)
		return false
	}
	return true
}

func (b *sharedBudget) give(n int64) {
	if b != nil {
		b.used.Add(-n)
	}
}

type unpacker struct {
	root    int   // the root directory's descriptor
	budget  int64 // bytes the image may still write
	shared  *sharedBudget
	taken   int64 // bytes taken from shared
	entries int   // entries left before the image is refused
	walks   int   // directories left to walk through before it is
	// layer holds the paths written by the layer being applied, which an
	// opaque marker of the same layer must keep: by path element, so that
	// it grows with the elements a layer names, not with each name's depth
	// times its length.
	layer written
}

// written is what a layer wrote: each path element by its directory's
// number (0 for the root) and its name, numbered in turn. One flat map
// costs a few dozen bytes and the name per element.
type written map[wkey]int32

type wkey struct {
	dir  int32
	name string
}

// mark records parts as written, and every directory on the way.
func (w written) mark(parts []string) {
	var dir int32
	for _, p := range parts {
		k := wkey{dir, p}
		n, ok := w[k]
		if !ok {
			n = int32(len(w) + 1)
			w[wkey{dir, strings.Clone(p)}] = n // not the whole entry name
		}
		dir = n
	}
}

// has reports whether the layer wrote name in the directory parts, or
// something below it.
func (w written) has(parts []string, name string) bool {
	var dir int32
	for _, p := range parts {
		n, ok := w[wkey{dir, p}]
		if !ok {
			return false
		}
		dir = n
	}
	_, ok := w[wkey{dir, name}]
	return ok
}

// entryCost is what every name the unpacker makes (a file, a directory,
// a symlink, a hard link) counts against the size cap, beside a file's
// content: a block on disk, however short the entry that made it, and an
// inode, which an empty file costs the disk without a byte. The store
// counts its images the same way (du), so images of empty files cannot
// pile up within its cap.
const entryCost = 4096

// maxEntries bounds the entries of one image, so a stream of empty
// headers cannot run for ever within the byte budget, nor take the host
// file system's inodes (an empty file costs no bytes but an inode: ext4
// makes one inode per 16 KiB by default, 6.5 million on a 100 GB disk).
// Large real images hold a few hundred thousand.
const maxEntries = 1 << 20

// maxWalk bounds the directories the unpacker walks through, in all, on
// the way to an image's names (a few microseconds each): a million names
// each 2000 directories deep, within every other bound, would take hours.
// A real image's names are a few directories deep on average (one of
// 38,000 names walks 226,000); at this bound, one of the most entries an
// image may have averages 16. Refusing takes at most the bound's time,
// about two minutes.
var maxWalk = 16 << 20

func newUnpacker(root string, budget int64, shared *sharedBudget) (*unpacker, error) {
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("opening root: %w", err)
	}
	return &unpacker{root: fd, budget: budget, shared: shared, entries: maxEntries, walks: maxWalk}, nil
}

// close gives back what the unpacker took of the shared budget: what it
// wrote is the store's (and counted by it) or removed.
func (u *unpacker) close() {
	unix.Close(u.root)
	u.shared.give(u.taken)
	u.taken = 0
}

// take reserves n bytes of the store's shared budget for name.
func (u *unpacker) take(n int64, name string) error {
	if !u.shared.take(n) {
		return fmt.Errorf("%w: entry %q: the images being unpacked at once would take more than %d bytes; try again", errBusy, name, u.shared.max)
	}
	u.taken += n
	return nil
}

// apply unpacks one uncompressed layer.
func (u *unpacker) apply(r io.Reader) error {
	u.layer = written{}
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading layer: %w", err)
		}
		if u.entries--; u.entries < 0 {
			return fmt.Errorf("%w: more than %d entries", errTooLarge, maxEntries)
		}
		if err := u.entry(hdr, tr); err != nil {
			if errors.Is(err, unix.ENAMETOOLONG) || errors.Is(err, unix.EMLINK) {
				// A name element, or links to one file, beyond what the
				// file system holds: the image's fault, not the store's.
				err = fmt.Errorf("%w: %w", errHostile, err)
			}
			return err
		}
	}
}

// clean turns an entry name into components below the root. Absolute names
// are taken relative to the root; a ".." component is refused rather than
// guessed at.
func clean(name string) ([]string, error) {
	// Longer names are not usable by path on Linux, and deep trees would
	// make every later entry's walk slow.
	if len(name) >= unix.PathMax {
		return nil, fmt.Errorf("%w: a name of %d bytes", errHostile, len(name))
	}
	var parts []string
	for _, p := range strings.Split(name, "/") {
		switch p {
		case "", ".":
			continue
		case "..":
			return nil, fmt.Errorf("%w %q: path escapes the root", errHostile, name)
		}
		parts = append(parts, p)
	}
	return parts, nil
}

// parent opens the directory holding parts' last component, creating
// missing directories, and never following a symlink.
func (u *unpacker) parent(name string, parts []string, create bool) (int, error) {
	if u.walks -= len(parts) - 1; u.walks < 0 {
		return -1, fmt.Errorf("%w: entry %q: the image's names are too deep in all (more than %d directories walked)", errTooLarge, name, maxWalk)
	}
	fd, err := unix.Dup(u.root)
	if err != nil {
		return -1, err
	}
	for _, p := range parts[:len(parts)-1] {
		next, err := unix.Openat(fd, p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err == unix.ENOENT && create {
			if err = unix.Mkdirat(fd, p, 0o755); err == nil {
				err = u.charge(entryCost, name)
			}
			if err == nil || err == unix.EEXIST {
				next, err = unix.Openat(fd, p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			}
		}
		unix.Close(fd)
		if err == unix.ELOOP || err == unix.ENOTDIR {
			return -1, fmt.Errorf("%w %q: path through a symlink or a file", errHostile, name)
		}
		if errors.Is(err, errTooLarge) {
			return -1, err
		}
		if err != nil {
			return -1, fmt.Errorf("entry %q: %w", name, err)
		}
		fd = next
	}
	return fd, nil
}

func (u *unpacker) entry(hdr *tar.Header, r io.Reader) error {
	parts, err := clean(hdr.Name)
	if err != nil {
		return err
	}
	if len(parts) == 0 {
		return nil // the root itself keeps the store's mode
	}
	base := parts[len(parts)-1]
	key := strings.Join(parts, "/")

	// Whiteouts remove what lower layers made.
	if base == ".wh..wh..opq" {
		dir, err := u.parent(hdr.Name, parts, true)
		if err != nil {
			return err
		}
		defer unix.Close(dir)
		return u.opaque(dir, parts[:len(parts)-1])
	}
	if strings.HasPrefix(base, ".wh.") {
		dir, err := u.parent(hdr.Name, parts, false)
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		if err != nil {
			return err
		}
		defer unix.Close(dir)
		return removeAt(dir, strings.TrimPrefix(base, ".wh."))
	}

	switch hdr.Typeflag {
	case tar.TypeReg, tar.TypeRegA, tar.TypeDir, tar.TypeSymlink, tar.TypeLink:
	default:
		return nil // devices, fifos, and extended headers: dropped
	}
	dir, err := u.parent(hdr.Name, parts, true)
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	u.layer.mark(parts)
	// Only the permission bits are kept: never set-id or sticky bits, and
	// never write for the group or others. The store is readable by every
	// local account, and a directory anyone may write (a Debian image's
	// /var/tmp, 1777 in the layer) would let any of them plant a file
	// under every sandbox of the image; inside a sandbox the root is
	// read-only, so nothing there changes.
	perm := uint32(hdr.Mode) & 0o755

	switch hdr.Typeflag {
	case tar.TypeDir:
		var st unix.Stat_t
		if err := unix.Fstatat(dir, base, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil && st.Mode&unix.S_IFMT != unix.S_IFDIR {
			if err := removeAt(dir, base); err != nil {
				return err
			}
		}
		err := unix.Mkdirat(dir, base, 0o700)
		if err == nil {
			err = u.charge(entryCost, hdr.Name)
		}
		if err != nil && err != unix.EEXIST {
			if errors.Is(err, errTooLarge) {
				return err
			}
			return fmt.Errorf("entry %q: %w", hdr.Name, err)
		}
		fd, err := unix.Openat(dir, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("entry %q: %w", hdr.Name, err)
		}
		// The store must be able to fill and remove every directory.
		err = unix.Fchmod(fd, perm|0o700)
		unix.Close(fd)
		return err

	case tar.TypeReg, tar.TypeRegA:
		if hdr.Size < 0 || hdr.Size > u.budget {
			return fmt.Errorf("%w: entry %q of %d bytes exceeds the size cap", errTooLarge, hdr.Name, hdr.Size)
		}
		if err := u.take(hdr.Size, hdr.Name); err != nil {
			return err
		}
		if err := u.charge(entryCost, hdr.Name); err != nil {
			return err
		}
		if err := removeAt(dir, base); err != nil {
			return err
		}
		fd, err := unix.Openat(dir, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return fmt.Errorf("entry %q: %w", hdr.Name, err)
		}
		f := os.NewFile(uintptr(fd), base)
		n, err := io.Copy(f, io.LimitReader(r, hdr.Size))
		u.budget -= n
		if err == nil && n != hdr.Size {
			err = io.ErrUnexpectedEOF
		}
		if err == nil {
			err = f.Chmod(os.FileMode(perm))
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("entry %q: %w", hdr.Name, err)
		}
		u.touch(dir, base, hdr)
		return nil

	case tar.TypeSymlink:
		if err := removeAt(dir, base); err != nil {
			return err
		}
		// The target is stored as written: it is resolved only inside the
		// sandbox, whose root this is.
		if len(hdr.Linkname) >= unix.PathMax {
			return fmt.Errorf("%w %q: a link target of %d bytes", errHostile, hdr.Name, len(hdr.Linkname))
		}
		if err := u.charge(entryCost+int64(len(hdr.Linkname)), hdr.Name); err != nil {
			return err
		}
		if err := unix.Symlinkat(hdr.Linkname, dir, base); err != nil {
			return fmt.Errorf("entry %q: %w", hdr.Name, err)
		}
		u.touch(dir, base, hdr)
		return nil

	case tar.TypeLink:
		tparts, err := clean(hdr.Linkname)
		if err != nil || len(tparts) == 0 {
			return fmt.Errorf("%w %q: hard link to %q outside the root", errHostile, hdr.Name, hdr.Linkname)
		}
		tdir, err := u.parent(hdr.Linkname, tparts, false)
		if err != nil {
			if errors.Is(err, errHostile) || errors.Is(err, unix.ENOENT) {
				return fmt.Errorf("%w %q: hard link to %q, not a file in the image", errHostile, hdr.Name, hdr.Linkname)
			}
			return err
		}
		defer unix.Close(tdir)
		tbase := tparts[len(tparts)-1]
		var st unix.Stat_t
		if err := unix.Fstatat(tdir, tbase, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			return fmt.Errorf("%w %q: hard link to %q, not a file in the image", errHostile, hdr.Name, hdr.Linkname)
		}
		if strings.Join(tparts, "/") == key {
			return nil
		}
		if err := u.charge(entryCost, hdr.Name); err != nil {
			return err
		}
		if err := removeAt(dir, base); err != nil {
			return err
		}
		// Flags 0: linkat never follows a symlink in the last component.
		if err := unix.Linkat(tdir, tbase, dir, base, 0); err != nil {
			return fmt.Errorf("entry %q: %w", hdr.Name, err)
		}
		return nil
	}
	return nil
}

// touch keeps the entry's modification time (Python, for one, checks its
// compiled files against their sources' times).
func (u *unpacker) touch(dir int, base string, hdr *tar.Header) {
	if hdr.ModTime.IsZero() {
		return
	}
	ts := unix.NsecToTimespec(hdr.ModTime.UnixNano())
	unix.UtimesNanoAt(dir, base, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW)
}

// charge counts n bytes the image made against the size cap.
func (u *unpacker) charge(n int64, name string) error {
	if u.budget -= n; u.budget < 0 {
		return fmt.Errorf("%w: entry %q: the image exceeds the size cap", errTooLarge, name)
	}
	return u.take(n, name)
}

// opaque empties the directory dir (at parts) of what lower layers made.
func (u *unpacker) opaque(dir int, parts []string) error {
	names, err := readDirNames(dir)
	if err != nil {
		return err
	}
	for _, n := range names {
		if u.layer.has(parts, n) {
			continue
		}
		if err := removeAt(dir, n); err != nil {
			return err
		}
	}
	return nil
}

func readDirNames(dir int) ([]string, error) {
	fd, err := unix.Openat(dir, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), ".")
	defer f.Close()
	return f.Readdirnames(-1)
}

// removeAt removes name in dir, a directory with everything below it,
// never following a symlink. A missing name is not an error.
func removeAt(dir int, name string) error {
	if name == "" || name == "." || name == ".." || strings.Contains(name, "/") {
		return fmt.Errorf("%w: whiteout of %q", errHostile, name)
	}
	err := unix.Unlinkat(dir, name, 0)
	if err == nil || err == unix.ENOENT {
		return nil
	}
	if err != unix.EISDIR && err != unix.EPERM {
		return fmt.Errorf("removing %q: %w", name, err)
	}
	sub, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("removing %q: %w", name, err)
	}
	unix.Fchmod(sub, 0o700)
	names, err := readDirNames(sub)
	if err == nil {
		for _, n := range names {
			if err = removeAt(sub, n); err != nil {
				break
			}
		}
	}
	unix.Close(sub)
	if err != nil {
		return err
	}
	if err := unix.Unlinkat(dir, name, unix.AT_REMOVEDIR); err != nil && err != unix.ENOENT {
		return fmt.Errorf("removing %q: %w", name, err)
	}
	return nil
}
