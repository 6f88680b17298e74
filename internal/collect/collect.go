// Package collect reads the files a job's Collect names out of its
// scratch directory once the program has ended: on the host (the process
// tier), inside the sandbox by its agent (gVisor, microVM), or from the
// WASM tier's in-memory scratch. Every component is looked up in its
// parent without following a link, so a link the program planted never
// leads outside the scratch; only regular files are read, and the total
// is capped.
package collect

import (
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/internal/value"
)

// MaxBytes caps what one job collects, all files together.
const MaxBytes = 16 << 20

const (
	maxFiles   = 1024    // files returned
	maxEntries = 100_000 // directory entries read while matching
	maxPath    = 4096    // bytes of a returned path (PATH_MAX)
)

// Kind is what a name in a Tree is.
type Kind int

// The kinds of names.
const (
	Missing Kind = iota
	Regular
	Directory
	Link
	Other
)

// Tree is one directory as the walker reads it. Nothing in it may follow
// a link: Stat reports one as Link, Sub and Read refuse one.
type Tree interface {
	// Names lists the directory's entries.
	Names() ([]string, error)
	// Stat says what name is and its size, without following a link.
	Stat(name string) (Kind, int64, error)
	// Sub opens the directory name.
	Sub(name string) (Tree, error)
	// Read reads the regular file name, at most limit bytes.
	Read(name string, limit int64) ([]byte, error)
	Close()
}

// ErrLink is what Sub or Read return for a name that became a link.
var ErrLink = errors.New("a symbolic link, not followed")

// Result is what was collected: files by path relative to the scratch,
// and one "path: reason" line per file left out or pattern that matched
// nothing.
type Result struct {
	Files   map[string]string
	Skipped []string
}

// Walk collects what patterns name below root (which stays open).
func Walk(root Tree, patterns []string, maxBytes int64) Result {
	if maxBytes <= 0 {
		maxBytes = MaxBytes
	}
	c := &collector{left: maxBytes, res: Result{Files: map[string]string{}}, seen: map[string]bool{}}
	c.notes = noteList{res: &c.res}
	for _, p := range patterns {
		before := c.matched
		c.walk(root, "", strings.Split(p, "/"))
		if c.matched == before {
			c.skip(p, "matched nothing")
		}
	}
	c.notes.end()
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
	notes   noteList
}

// skip notes name as left out, for why. The notes are as bounded as
// Accept's, in number and length: a program can leave many thousands of
// names the walk refuses, under paths of any length.
func (c *collector) skip(name, why string) {
	c.notes.add(name, why)
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

// walk matches comps[0] in dir (rel is its path), then the rest below
// each match.
func (c *collector) walk(dir Tree, rel string, comps []string) {
	comp := comps[0]
	names := []string{comp}
	if meta(comp) {
		all, err := dir.Names()
		c.entries += len(all)
		if err == nil && c.entries > maxEntries {
			err = fmt.Errorf("more than %d directory entries to match", maxEntries)
		}
		if err != nil {
			c.skip(path.Join(rel, comp), err.Error())
			return
		}
		slices.Sort(all)
		names = names[:0]
		for _, n := range all {
			if ok, _ := path.Match(comp, n); ok {
				names = append(names, n)
			}
		}
	}
	for _, n := range names {
		c.one(dir, path.Join(rel, n), n, comps[1:], !meta(comp))
	}
}

// one handles a name that matched: a file to read (no components left)
// or a directory to descend into.
func (c *collector) one(dir Tree, rel, name string, rest []string, literal bool) {
	if len(rel) > maxPath {
		// openat walks any depth, but no caller could name, write or
		// show such a path; what lies below is longer still.
		c.matched++
		c.skip(rel, fmt.Sprintf("the path is longer than %d bytes", maxPath))
		return
	}
	kind, size, err := dir.Stat(name)
	switch {
	case err != nil:
		c.skip(rel, err.Error())
		return
	case kind == Missing:
		if !literal {
			c.skip(rel, "gone")
		}
		return
	case kind == Link:
		c.matched++
		c.skip(rel, ErrLink.Error())
		return
	}
	if len(rest) > 0 {
		if kind != Directory {
			return
		}
		sub, err := dir.Sub(name)
		if err != nil {
			c.skip(rel, err.Error())
			return
		}
		defer sub.Close()
		c.walk(sub, rel, rest)
		return
	}
	c.matched++
	if c.seen[rel] {
		return
	}
	c.seen[rel] = true
	switch {
	case kind != Regular:
		c.skip(rel, "not a regular file")
	case !utf8.ValidString(rel):
		c.skip(rel, "the name is not UTF-8")
	case strings.ContainsFunc(rel, func(r rune) bool { return !unicode.IsPrint(r) }):
		// A name with a newline or an escape sequence would reach the
		// caller's terminal and file system as it is; Accept refuses it
		// from an agent too.
		c.skip(rel, "the name holds a character that is not printable")
	case len(c.res.Files) >= maxFiles:
		c.skip(rel, fmt.Sprintf("more than %d files", maxFiles))
	case size > c.left:
		c.skip(rel, fmt.Sprintf("%d bytes, over what is left of the %d-byte cap", size, c.left))
	default:
		data, err := dir.Read(name, c.left+1)
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

// Accept bounds what an agent inside a sandbox sent for the job's
// patterns, which the host cannot trust more than the sandbox: paths must
// be clean, relative and printable and named by one of the patterns (as
// Walk matches them), the files within the count and byte caps, the notes
// few and short. What fails is dropped and said so, in as many notes as a
// walk could write at most, each cut to a bounded length.
func Accept(w Wire, patterns []string) Result {
	res := Result{Files: map[string]string{}}
	notes := noteList{res: &res}
	left := int64(MaxBytes)
	for _, name := range slices.Sorted(maps.Keys(w.Files)) {
		data := w.Files[name]
		switch {
		case !cleanRel(name):
			notes.add(name, "not a clean relative path")
		case !named(patterns, name):
			notes.add(name, "named by no collect pattern")
		case len(res.Files) >= maxFiles:
			notes.add(name, fmt.Sprintf("more than %d files", maxFiles))
		case int64(len(data)) > left:
			notes.add(name, "over the cap")
		default:
			left -= int64(len(data))
			res.Files[name] = string(data)
		}
	}
	for _, s := range w.Skipped {
		notes.add(s, "")
	}
	notes.end()
	if len(res.Files) == 0 {
		res.Files = nil
	}
	return res
}

// maxNotes bounds the notes Accept keeps, and maxNoteName the bytes of an
// agent's name or note it quotes: a walk writes at most one note per
// pattern and per file it looked at, and a file name is at most a few
// hundred bytes.
const (
	maxNotes    = 2*maxFiles + 64
	maxNoteName = 1024
)

// noteList adds Accept's notes to a Result up to maxNotes, then counts
// what it leaves out.
type noteList struct {
	res  *Result
	left int
}

func (n *noteList) add(name, why string) {
	if len(n.res.Skipped) >= maxNotes {
		n.left++
		return
	}
	s := show(value.Clip(name, maxNoteName))
	if why != "" {
		s += ": " + why
	}
	n.res.Skipped = append(n.res.Skipped, s)
}

func (n *noteList) end() {
	if n.left > 0 {
		n.res.Skipped = append(n.res.Skipped, fmt.Sprintf("... and %d more", n.left))
	}
}

// named reports whether one of patterns names the clean relative path
// rel as Walk matches it: as many elements, each matched by path.Match.
func named(patterns []string, rel string) bool {
	parts := strings.Split(rel, "/")
	for _, p := range patterns {
		if matches(strings.Split(p, "/"), parts) {
			return true
		}
	}
	return false
}

func matches(comps, parts []string) bool {
	if len(comps) != len(parts) {
		return false
	}
	for i, c := range comps {
		if ok, _ := path.Match(c, parts[i]); !ok {
			return false
		}
	}
	return true
}

func cleanRel(name string) bool {
	return name != "" && name != "." && len(name) <= maxPath && utf8.ValidString(name) && !strings.HasPrefix(name, "/") && path.Clean(name) == name &&
		!slices.Contains(strings.Split(name, "/"), "..") && !strings.ContainsFunc(name, func(r rune) bool { return !unicode.IsPrint(r) })
}
