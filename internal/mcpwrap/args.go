package mcpwrap

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"unicode/utf8"

	"golang.org/x/text/cases"
	"golang.org/x/text/unicode/norm"
)

// AnyArg, as an argument name in a refuse map, applies its patterns to
// every string anywhere in a call's arguments.
const AnyArg = "*"

// pattern is one compiled refused pattern.
type pattern struct {
	src string
	re  *regexp.Regexp
	// elems: a glob without "/" also matches any "/"-separated element
	// of a value, so "*.pem" refuses a key file in any directory.
	elems bool
}

// compilePattern reads a refused pattern: "re:EXPR" is a regular
// expression (RE2) matching anywhere in a value unless anchored; any other
// pattern is a glob matching the whole value, where "*" is any run of
// characters but "/", "**" any run including "/", "**/" zero or more
// directories, "?" one character but "/", and the rest is literal.
func compilePattern(s string) (pattern, error) {
	if s == "" {
		return pattern{}, errors.New("an empty pattern")
	}
	if expr, ok := strings.CutPrefix(s, "re:"); ok {
		re, err := regexp.Compile(expr)
		if err != nil {
			return pattern{}, fmt.Errorf("pattern %q: %v", s, err)
		}
		return pattern{src: s, re: re}, nil
	}
	var b strings.Builder
	b.WriteString(`^`)
	for i := 0; i < len(s); {
		switch {
		case strings.HasPrefix(s[i:], "**/"):
			b.WriteString(`(?:.*/)?`)
			i += 3
		case strings.HasPrefix(s[i:], "**"):
			b.WriteString(`.*`)
			i += 2
		case s[i] == '*':
			b.WriteString(`[^/]*`)
			i++
		case s[i] == '?':
			b.WriteString(`[^/]`)
			i++
		default:
			b.WriteString(regexp.QuoteMeta(s[i : i+1]))
			i++
		}
	}
	b.WriteString(`$`)
	re, err := regexp.Compile(b.String())
	if err != nil {
		return pattern{}, fmt.Errorf("pattern %q: %v", s, err)
	}
	return pattern{src: s, re: re, elems: !strings.Contains(s, "/")}, nil
}

func (p pattern) match(v string) bool {
	if p.re.MatchString(v) {
		return true
	}
	if p.elems {
		for e := range strings.SplitSeq(v, "/") {
			if p.re.MatchString(e) {
				return true
			}
		}
	}
	return false
}

// forms are the readings of an argument's value a server might act on:
// as written, in Unicode's composed and compatibility forms,
// percent-decoded (repeatedly), with backslashes as slashes, trimmed of
// surrounding spaces and quotes, and each with its "." and ".." elements
// cleaned. A refused pattern is tried against every one, so an encoded or
// uncleaned variant of a refused value is refused too.
func forms(v string) []string {
	out := []string{v}
	for _, f := range []norm.Form{norm.NFC, norm.NFKC} {
		if n := f.String(v); n != v {
			out = append(out, n)
		}
	}
	d := v
	for range 3 {
		u, err := url.PathUnescape(d)
		if err != nil || u == d {
			break
		}
		out = append(out, u)
		d = u
	}
	for _, f := range out {
		if strings.Contains(f, `\`) {
			out = append(out, strings.ReplaceAll(f, `\`, "/"))
		}
	}
	for _, f := range out {
		if t := strings.Trim(f, trimmed); t != f {
			out = append(out, t)
		}
	}
	for _, f := range out {
		if strings.Contains(f, "/") {
			if c := path.Clean(f); c != f {
				out = append(out, c)
			}
		}
	}
	return out
}

// root is an allowed root as written (cleaned) and as it resolves on the
// host.
type root struct{ lexical, real string }

// argRules are one tool's argument rules, compiled.
type argRules struct {
	refuse map[string][]pattern // by argument name, AnyArg: everywhere
	paths  []string             // confined arguments
	roots  []root
}

func (a *argRules) empty() bool { return len(a.refuse) == 0 && len(a.paths) == 0 }

// compileArgs merges the policy's argument rules with a tool's: refused
// patterns and path arguments add up; the tool's roots, when it names
// any, replace the policy's.
func compileArgs(p *Policy, r Rule, where string) (*argRules, error) {
	a := &argRules{refuse: map[string][]pattern{}}
	for _, m := range []map[string][]string{p.Refuse, r.Refuse} {
		for arg, pats := range m {
			if arg == "" {
				return nil, fmt.Errorf("%s: refuse: an empty argument name", where)
			}
			for _, s := range pats {
				pt, err := compilePattern(s)
				if err != nil {
					return nil, fmt.Errorf("%s: refuse: %s: %v", where, arg, err)
				}
				a.refuse[arg] = append(a.refuse[arg], pt)
			}
		}
	}
	seen := map[string]bool{}
	for _, arg := range append(append([]string(nil), p.PathArgs...), r.PathArgs...) {
		if arg == "" || arg == AnyArg {
			return nil, fmt.Errorf("%s: path_args: want argument names", where)
		}
		if !seen[arg] {
			seen[arg] = true
			a.paths = append(a.paths, arg)
		}
	}
	roots := p.Roots
	if len(r.Roots) > 0 {
		roots = r.Roots
	}
	if len(a.paths) > 0 && len(roots) == 0 {
		return nil, fmt.Errorf("%s: path_args %v need roots", where, a.paths)
	}
	for _, s := range roots {
		if !path.IsAbs(s) {
			return nil, fmt.Errorf("%s: roots: %q is not an absolute path", where, s)
		}
		lex := path.Clean(s)
		real, err := resolve(lex)
		if err != nil {
			return nil, fmt.Errorf("%s: roots: %q: %v", where, s, err)
		}
		a.roots = append(a.roots, root{lex, real})
	}
	return a, nil
}

// ArgRefused is why a call's arguments were refused.
type ArgRefused struct {
	Arg    string // the argument's name
	Reason string
}

func (e *ArgRefused) Error() string { return "argument " + e.Arg + ": " + e.Reason }

// check applies the rules to a call's arguments (a JSON object, or
// nothing).
func (a *argRules) check(raw json.RawMessage) error {
	if a.empty() {
		return nil
	}
	args := map[string]any{}
	if t := bytes.TrimSpace(raw); len(t) > 0 && !bytes.Equal(t, []byte("null")) {
		dec := json.NewDecoder(bytes.NewReader(t))
		dec.UseNumber()
		if err := dec.Decode(&args); err != nil {
			return &ArgRefused{Arg: AnyArg, Reason: "the arguments are not a JSON object"}
		}
	}
	names := make([]string, 0, len(a.refuse))
	for arg := range a.refuse {
		names = append(names, arg)
	}
	sort.Strings(names)
	for _, arg := range names {
		var v any = args
		if arg != AnyArg {
			var ok bool
			if v, ok = args[arg]; !ok {
				continue
			}
		}
		var err error
		walkStrings(v, arg == AnyArg, func(s string) bool {
			for _, f := range forms(s) {
				for _, p := range a.refuse[arg] {
					if p.match(f) {
						err = &ArgRefused{Arg: arg, Reason: fmt.Sprintf("%q matches the refused pattern %q", s, p.src)}
						return false
					}
				}
			}
			return true
		})
		if err != nil {
			return err
		}
	}
	for _, arg := range a.paths {
		v, ok := args[arg]
		if !ok {
			continue
		}
		var list []any
		switch v := v.(type) {
		case string:
			list = []any{v}
		case []any:
			list = v
		default:
			return &ArgRefused{Arg: arg, Reason: "want a path, or a list of paths"}
		}
		for _, e := range list {
			s, ok := e.(string)
			if !ok {
				return &ArgRefused{Arg: arg, Reason: "want a path, or a list of paths"}
			}
			if err := a.confine(s); err != nil {
				return &ArgRefused{Arg: arg, Reason: err.Error()}
			}
		}
	}
	return nil
}

// walkStrings calls f with every string in v (and, if keys, every object
// key) until f returns false.
func walkStrings(v any, keys bool, f func(string) bool) bool {
	switch v := v.(type) {
	case string:
		return f(v)
	case []any:
		for _, e := range v {
			if !walkStrings(e, keys, f) {
				return false
			}
		}
	case map[string]any:
		for k, e := range v {
			if keys && !f(k) {
				return false
			}
			if !walkStrings(e, keys, f) {
				return false
			}
		}
	}
	return true
}

// trimmed are what a server may trim from a path's ends (the reference
// filesystem server trims spaces and one quote).
const trimmed = " \t\r\n\"'"

// percent finds percent-encoding, which a server may decode into another
// path.
var percent = regexp.MustCompile(`%[0-9A-Fa-f]{2}`)

// confine checks one path: it must be absolute and plain, and both its
// cleaned form and where it resolves on the host (links followed as the
// kernel does, ".." after a link from the link's target) must lie under an
// allowed root. What it refuses, a server would otherwise read as another
// path: a "~" it expands, a scheme, percent-encoding it decodes, a
// backslash it takes for a separator, spaces or quotes it trims (making
// "/root/.. " the root's parent). A name a server matches to another
// entry equal in Unicode's composed form is resolved as that entry.
func (a *argRules) confine(p string) error {
	switch {
	case !strings.HasPrefix(p, "/"):
		return fmt.Errorf("%q is not an absolute path", p)
	case strings.Trim(p, trimmed) != p:
		return fmt.Errorf("%q ends in a space or quote", p)
	case strings.ContainsFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return fmt.Errorf("%q holds a control character", p)
	case strings.Contains(p, `\`):
		return fmt.Errorf("%q holds a backslash", p)
	case percent.MatchString(p):
		return fmt.Errorf("%q holds percent-encoding", p)
	}
	lex := path.Clean(p)
	real, err := resolve(p)
	if err != nil {
		return fmt.Errorf("%q: %v", p, err)
	}
	lexOK, realOK := false, false
	for _, r := range a.roots {
		lexOK = lexOK || under(lex, r.lexical) || under(lex, r.real)
		realOK = realOK || under(real, r.real)
	}
	switch {
	case !lexOK:
		return fmt.Errorf("%q is outside the allowed roots", p)
	case !realOK:
		return fmt.Errorf("%q resolves to %s, outside the allowed roots", p, real)
	}
	return nil
}

func under(p, root string) bool {
	return root == "/" || p == root || strings.HasPrefix(p, root+"/")
}

// maxLinks bounds the links followed in resolving one path, as the
// kernel's ELOOP does.
const maxLinks = 40

// resolve returns where absolute path p leads on the host: each element
// in turn, a link replaced by its target, ".." taking the parent of what
// was resolved so far (as the kernel does, not of the text). From the
// first element that does not exist, the rest is joined as text, which is
// what a server creating the path would create.
func resolve(p string) (string, error) {
	dest, rest, links := "/", p, 0
	for rest != "" {
		var comp string
		comp, rest, _ = strings.Cut(strings.TrimLeft(rest, "/"), "/")
		switch comp {
		case "", ".":
			continue
		case "..":
			dest = path.Dir(dest)
			continue
		}
		next := path.Join(dest, comp)
		fi, err := os.Lstat(next)
		if errors.Is(err, fs.ErrNotExist) && !isASCII(comp) {
			// A server may take a name for an entry equal to it in
			// Unicode's composed form, as the reference filesystem
			// server does: that entry is followed.
			next, err = equivalent(dest, comp)
			if err == nil {
				fi, err = os.Lstat(next)
			}
		}
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return path.Join(next, rest), nil
		}
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			dest = next
			continue
		}
		if links++; links > maxLinks {
			return "", errors.New("too many links")
		}
		target, err := os.Readlink(next)
		if err != nil {
			return "", err
		}
		if path.IsAbs(target) {
			dest = "/"
		}
		rest = target + "/" + rest
	}
	return dest, nil
}

func isASCII(s string) bool {
	for i := range len(s) {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// equivalent finds the one entry of dir whose name equals name in
// Unicode's composed form (fs.ErrNotExist if none).
func equivalent(dir, name string) (string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	want := norm.NFC.String(name)
	var found []string
	for _, e := range entries {
		if norm.NFC.String(e.Name()) == want {
			found = append(found, e.Name())
		}
	}
	switch len(found) {
	case 0:
		return path.Join(dir, name), fs.ErrNotExist
	case 1:
		return path.Join(dir, found[0]), nil
	}
	return "", fmt.Errorf("%s holds %d names equal to %q in Unicode's composed form", dir, len(found), name)
}

// checkKeys refuses arguments whose objects, at any depth, hold a key
// twice or two keys equal but for case, and a top-level key equal but for
// case to one of named (the arguments the policy checks): a server's JSON
// parser may keep the first of duplicated keys where the policy's checks
// and an approval's digest read the last, or match a key to its field
// regardless of case (as Go's encoding/json does), and would then act on
// a value nothing checked.
func checkKeys(raw json.RawMessage, named []string) error {
	if t := bytes.TrimSpace(raw); len(t) == 0 || bytes.Equal(t, []byte("null")) {
		return nil
	}
	fold := cases.Fold()
	top := map[string]string{}
	for _, n := range named {
		top[fold.String(n)] = n
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	type frame struct {
		object bool
		key    bool // the next token of this object is a key
		seen   map[string]string
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return &ArgRefused{Arg: AnyArg, Reason: "the arguments are not JSON: " + err.Error()}
		}
		var f *frame
		if len(stack) > 0 {
			f = stack[len(stack)-1]
		}
		if f != nil && f.object && f.key {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:len(stack)-1]
				continue
			}
			k, _ := tok.(string)
			fk := fold.String(k)
			if prev, ok := f.seen[fk]; ok {
				if prev == k {
					return &ArgRefused{Arg: k, Reason: "the key is given twice"}
				}
				return &ArgRefused{Arg: k, Reason: fmt.Sprintf("the keys %q and %q differ only in case", prev, k)}
			}
			f.seen[fk] = k
			if n, ok := top[fk]; ok && len(stack) == 1 && n != k {
				return &ArgRefused{Arg: k, Reason: fmt.Sprintf("differs only in case from %q, which the policy checks", n)}
			}
			f.key = false
			continue
		}
		if f != nil && f.object {
			f.key = true // this value ends, the next token is a key
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{object: true, key: true, seen: map[string]string{}})
		case json.Delim('['):
			stack = append(stack, &frame{})
		case json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
	}
}

// named are the argument names the rules check.
func (a *argRules) named() []string {
	if a == nil {
		return nil
	}
	names := append([]string(nil), a.paths...)
	for arg := range a.refuse {
		if arg != AnyArg {
			names = append(names, arg)
		}
	}
	return names
}

// plainUnicode refuses arguments whose strings a server may read other
// than the checks and an approval's digest do: bytes that are not UTF-8,
// or an escaped surrogate that is not half of a pair. Go reads each as
// U+FFFD, so "\udcfe" and "\udcff" would look alike here, where a server
// in Python keeps them apart (and names a different file with each).
// raw is one valid JSON value.
func plainUnicode(raw []byte) error {
	if !utf8.Valid(raw) {
		return &ArgRefused{Arg: AnyArg, Reason: "the arguments are not UTF-8"}
	}
	hex4 := func(b []byte) rune {
		if len(b) < 4 {
			return -1
		}
		var r rune
		for _, c := range b[:4] {
			switch {
			case c >= '0' && c <= '9':
				r = r<<4 | rune(c-'0')
			case c >= 'a' && c <= 'f':
				r = r<<4 | rune(c-'a'+10)
			case c >= 'A' && c <= 'F':
				r = r<<4 | rune(c-'A'+10)
			default:
				return -1
			}
		}
		return r
	}
	// In valid JSON a backslash only starts an escape inside a string.
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		i++ // the escaped character (a backslash among them) is passed
		if i >= len(raw) || raw[i] != 'u' {
			continue
		}
		r := hex4(raw[i+1:])
		i += 4
		switch {
		case r >= 0xd800 && r < 0xdc00:
			if rest := raw[i+1:]; len(rest) >= 6 && rest[0] == '\\' && rest[1] == 'u' {
				if lo := hex4(rest[2:]); lo >= 0xdc00 && lo < 0xe000 {
					i += 6
					continue
				}
			}
			return &ArgRefused{Arg: AnyArg, Reason: fmt.Sprintf("a lone surrogate escape \\u%04x", r)}
		case r >= 0xdc00 && r < 0xe000:
			return &ArgRefused{Arg: AnyArg, Reason: fmt.Sprintf("a lone surrogate escape \\u%04x", r)}
		}
	}
	return nil
}
