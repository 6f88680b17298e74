// Package collect reads the files a job's Collect names out of its
// scratch directory once the program has ended: on the host (the process
// tier) or inside the sandbox, by its agent (gVisor, microVM). Every
// component is opened relative to its parent without following a link,
// so a link the program planted never leads outside the scratch; only
// regular files are read, and the total is capped.
package collect

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// MaxBytes caps what one job collects, all files together.
const MaxBytes = 16 << 20

const (
	maxFiles   = 1024    // files returned
	maxEntries = 100_000 // directory entries read while matching
)

// Result is what was collected: files by path relative to the scratch,
// and one "path: reason" line per file left out or pattern that matched
// nothing.
type Result struct {
	Files   map[string]string
	Skipped []string
}

// Path collects from the scratch directory at dir (the directory itself
// is opened without following a link).
func Path(dir string, patterns []string, maxBytes int64) (Result, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return Result{}, fmt.Errorf("collecting files: opening the scratch directory: %w", err)
	}
	defer unix.Close(fd)
	return Dir(fd, patterns, maxBytes), nil
}

// Dir collects from the directory open at dirfd, which stays open.
func Dir(dirfd int, patterns []string, maxBytes int64) Result {
	if maxBytes <= 0 {
		maxBytes = MaxBytes
	}
	c := &collector{left: maxBytes, res: Result{Files: map[string]string{}}, seen: map[string]bool{}}
	for _, p := range patterns {
		before := c.matched
		c.walk(dirfd, "", strings.Split(p, "/"))
		if c.matched == before {
			c.skip(p, "matched nothing")
		}
	}
	if len(c.res.Files) == 0 {
		c.res.Files = nil
	}
	return c.res
}

type collector struct {
	left    int64
	entries int
	matched int
	res     Result
	seen    map[string]bool
}

func (c *collector) skip(name, why string) {
	c.res.Skipped = append(c.res.Skipped, show(name)+": "+why)
}

// show is a name as it may be printed: quoted when it holds anything
// that is not printable UTF-8.
func show(name string) string {
	if utf8.ValidString(name) && !strings.ContainsFunc(name, func(r rune) bool { return !unicode.IsPrint(r) }) {
		return name
	}
	return strconv.Quote(name)
}

func meta(comp string) bool { return strings.ContainsAny(comp, `*?[\`) }

// walk matches comps[0] in the directory at dirfd (rel is its path), then
// the rest below each match.
func (c *collector) walk(dirfd int, rel string, comps []string) {
	comp, last := comps[0], len(comps) == 1
	var names []string
	if meta(comp) {
		all, err := c.list(dirfd)
		if err != nil {
			c.skip(path.Join(rel, comp), err.Error())
			return
		}
		for _, n := range all {
			if ok, _ := path.Match(comp, n); ok {
				names = append(names, n)
			}
		}
	} else {
		names = []string{comp}
	}
	for _, n := range names {
		c.one(dirfd, path.Join(rel, n), n, comps[1:], last, !meta(comp))
	}
}

// one handles a name that matched: a file to read (last component) or a
// directory to descend into.
func (c *collector) one(dirfd int, rel, name string, rest []string, last, literal bool) {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if !errors.Is(err, unix.ENOENT) || !literal {
			c.skip(rel, err.Error())
		}
		return
	}
	mode := st.Mode & unix.S_IFMT
	if mode == unix.S_IFLNK {
		c.matched++
		c.skip(rel, "a symbolic link, not followed")
		return
	}
	if !last {
		if mode != unix.S_IFDIR {
			return
		}
		fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			c.skip(rel, err.Error())
			return
		}
		defer unix.Close(fd)
		c.walk(fd, rel, rest)
		return
	}
	c.matched++
	if c.seen[rel] {
		return
	}
	c.seen[rel] = true
	switch {
	case mode != unix.S_IFREG:
		c.skip(rel, "not a regular file")
	case !utf8.ValidString(rel):
		c.skip(rel, "the name is not UTF-8")
	case len(c.res.Files) >= maxFiles:
		c.skip(rel, fmt.Sprintf("more than %d files", maxFiles))
	case st.Size > c.left:
		c.skip(rel, fmt.Sprintf("%d bytes, over what is left of the %d-byte cap", st.Size, c.left))
	default:
		c.read(dirfd, rel, name)
	}
}

func (c *collector) read(dirfd int, rel, name string) {
	// O_NOFOLLOW and the check after opening: the name may have been
	// swapped for a link or a FIFO since it was looked at.
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			c.skip(rel, "a symbolic link, not followed")
		} else {
			c.skip(rel, err.Error())
		}
		return
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		c.skip(rel, "not a regular file")
		return
	}
	data, err := io.ReadAll(io.LimitReader(f, c.left+1))
	switch {
	case err != nil:
		c.skip(rel, err.Error())
	case int64(len(data)) > c.left:
		c.skip(rel, fmt.Sprintf("over what is left of the cap (%d bytes)", c.left))
	default:
		c.left -= int64(len(data))
		c.res.Files[rel] = string(data)
	}
}

// list reads a directory's names, sorted, within the entry budget.
func (c *collector) list(dirfd int) ([]string, error) {
	fd, err := unix.Openat(dirfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), ".")
	defer f.Close()
	var names []string
	for {
		batch, err := f.Readdirnames(256)
		names = append(names, batch...)
		c.entries += len(batch)
		if c.entries > maxEntries {
			return nil, fmt.Errorf("more than %d directory entries to match", maxEntries)
		}
		if err == io.EOF || len(batch) == 0 {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	slices.Sort(names)
	return names, nil
}

// Wire is a Result as an agent sends it to the host: contents always in
// base64 (a third larger), never as escaped strings (up to six times).
type Wire struct {
	Files   map[string][]byte `json:"files,omitempty"`
	Skipped []string          `json:"skipped,omitempty"`
}

// ToWire is what an agent sends for res.
func ToWire(res Result) Wire {
	w := Wire{Skipped: res.Skipped}
	if len(res.Files) > 0 {
		w.Files = make(map[string][]byte, len(res.Files))
		for k, v := range res.Files {
			w.Files[k] = []byte(v)
		}
	}
	return w
}

// Accept bounds what an agent inside a sandbox sent, which the host
// cannot trust more than the sandbox: paths must be clean, relative and
// printable, the files within the count and byte caps, the notes few and
// short. What fails is dropped and said so.
func Accept(w Wire) Result {
	res := Result{Files: map[string]string{}}
	left := int64(MaxBytes)
	for _, name := range slices.Sorted(maps.Keys(w.Files)) {
		data := w.Files[name]
		switch {
		case !cleanRel(name):
			res.Skipped = append(res.Skipped, show(name)+": not a clean relative path")
		case len(res.Files) >= maxFiles:
			res.Skipped = append(res.Skipped, show(name)+fmt.Sprintf(": more than %d files", maxFiles))
		case int64(len(data)) > left:
			res.Skipped = append(res.Skipped, show(name)+": over the cap")
		default:
			left -= int64(len(data))
			res.Files[name] = string(data)
		}
	}
	for i, s := range w.Skipped {
		if i >= maxFiles+64 {
			res.Skipped = append(res.Skipped, fmt.Sprintf("... and %d more", len(w.Skipped)-i))
			break
		}
		if len(s) > 1024 {
			s = s[:1024]
		}
		res.Skipped = append(res.Skipped, show(s))
	}
	if len(res.Files) == 0 {
		res.Files = nil
	}
	return res
}

func cleanRel(name string) bool {
	return name != "" && name != "." && utf8.ValidString(name) && !strings.HasPrefix(name, "/") && path.Clean(name) == name &&
		!slices.Contains(strings.Split(name, "/"), "..") && !strings.ContainsFunc(name, func(r rune) bool { return !unicode.IsPrint(r) })
}
