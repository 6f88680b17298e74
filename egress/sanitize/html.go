package sanitize

import (
	"bytes"
	"html"
	"strings"

	xhtml "golang.org/x/net/html"
)

// urlAttrs are attributes whose value is a URL some element fetches or
// follows (HTML, SVG and MathML; legacy ones included).
var urlAttrs = map[string]bool{
	"href": true, "src": true, "poster": true, "action": true, "formaction": true,
	"background": true, "data": true, "codebase": true, "cite": true, "longdesc": true,
	"usemap": true, "manifest": true, "xlink:href": true, "lowsrc": true, "dynsrc": true,
	"profile": true, "classid": true, "icon": true, "archive": true, "itemtype": true,
	"ping": true, // space-separated list, handled below
}

// srcsetAttrs hold comma-separated candidate lists.
var srcsetAttrs = map[string]bool{"srcset": true, "imagesrcset": true}

// HTML returns an HTML document or fragment with every offending URL
// neutralised (see [Sanitizer.Markdown]); bytes outside offending tags are
// unchanged.
func (s *Sanitizer) HTML(src []byte) ([]byte, []Finding) {
	edits, findings := s.sanitizeHTML(src, 0)
	return apply(src, mergeEdits(edits)), findings
}

// sanitizeHTML tokenises frag (which starts at base in the document) and
// returns edits that rewrite each offending tag with its offending
// attributes removed, and each offending style sheet emptied.
func (s *Sanitizer) sanitizeHTML(frag []byte, base int) ([]edit, []Finding) {
	return s.sanitizeHTMLDepth(frag, base, 0)
}

// rawTextTags are the elements whose content the tokenizer reads as text.
// A browser may still parse it as markup (noscript with scripting off, as
// in DOMParser; style inside svg, where <img> breaks out), so that text is
// checked as HTML too.
var rawTextTags = map[string]bool{
	"style": true, "script": true, "noscript": true, "noembed": true, "noframes": true,
	"iframe": true, "xmp": true, "textarea": true, "title": true, "plaintext": true,
}

// maxHTMLDepth bounds the re-parsing of raw text as markup.
const maxHTMLDepth = 4

func (s *Sanitizer) sanitizeHTMLDepth(frag []byte, base, depth int) ([]edit, []Finding) {
	var (
		edits    []edit
		findings []Finding
		rawTag   string
	)
	z := xhtml.NewTokenizer(bytes.NewReader(frag))
	off := 0
	for {
		tt := z.Next()
		if tt == xhtml.ErrorToken {
			break
		}
		raw := z.Raw()
		start := base + off
		off += len(raw)
		switch tt {
		case xhtml.StartTagToken, xhtml.SelfClosingTagToken:
			tok := z.Token()
			if rawTextTags[tok.Data] && tt == xhtml.StartTagToken {
				rawTag = tok.Data
			}
			keep, f := s.checkTag(tok)
			if dup := duplicateAttr(raw); dup != "" {
				// Browsers keep the first of duplicate attributes, as the
				// tokenizer does; another renderer might keep the last.
				// Rewriting the tag leaves only the one that was checked.
				f = append(f, Finding{Kind: "html", Reason: "<" + tok.Data + ">: duplicate attribute " + dup})
			}
			if len(f) == 0 {
				continue
			}
			for i := range f {
				f[i].Offset = start
			}
			findings = append(findings, f...)
			edits = append(edits, edit{start, start + len(raw), renderTag(tok.Data, keep, tt == xhtml.SelfClosingTagToken)})
		case xhtml.EndTagToken:
			rawTag = ""
		case xhtml.TextToken:
			if rawTag == "" {
				continue
			}
			if rawTag == "style" {
				if reason, host, bad := s.checkCSS(string(raw)); bad {
					findings = append(findings, Finding{Offset: start, Kind: "html", Host: host, Reason: "style sheet: " + reason})
					edits = append(edits, edit{start, start + len(raw), "/* blocked */"})
					continue
				}
			}
			if depth >= maxHTMLDepth {
				if bytes.IndexByte(raw, '<') >= 0 {
					findings = append(findings, Finding{Offset: start, Kind: "html", Reason: "markup nested too deep in raw text"})
					edits = append(edits, edit{start, start + len(raw), ""})
				}
				continue
			}
			e, f := s.sanitizeHTMLDepth(raw, start, depth+1)
			edits, findings = append(edits, e...), append(findings, f...)
		}
	}
	if off < len(frag) {
		// A tag cut off by the end of the fragment (a tag spread over the
		// lines of a block quote): it cannot be checked, so it goes.
		start := base + off
		edits = append(edits, edit{start, base + len(frag), ""})
		findings = append(findings, Finding{Offset: start, Kind: "html", Reason: "incomplete tag removed"})
	}
	return edits, findings
}

// checkTag returns the attributes to keep and a finding per attribute
// removed.
func (s *Sanitizer) checkTag(tok xhtml.Token) ([]xhtml.Attribute, []Finding) {
	var keep []xhtml.Attribute
	var findings []Finding
	refresh := false
	animatesURL := false
	for _, a := range tok.Attr {
		v := strings.ToLower(strings.TrimSpace(a.Val))
		switch strings.ToLower(a.Key) {
		case "http-equiv":
			refresh = refresh || v == "refresh"
		case "attributename":
			// SVG <animate>/<set> can rewrite an href after the fact.
			animatesURL = animatesURL || v == "href" || v == "xlink:href" || v == "src"
		}
	}
	for _, a := range tok.Attr {
		key := a.Key
		if a.Namespace != "" {
			key = a.Namespace + ":" + a.Key
		}
		key = strings.ToLower(key)
		reason, host, bad := s.checkAttr(tok.Data, key, a.Val, refresh)
		if !bad && (animatesURL && (key == "to" || key == "from" || key == "by" || key == "values") || tok.Data == "param" && key == "value") {
			for _, u := range strings.Split(a.Val, ";") {
				if r, b := s.check(strings.TrimSpace(u)); b {
					reason, host, bad = "animated or parameter URL: "+r, hostOf(u), true
					break
				}
			}
		}
		if bad {
			findings = append(findings, Finding{Kind: "html", Host: host, Reason: "<" + tok.Data + " " + key + ">: " + reason})
			continue
		}
		keep = append(keep, a)
	}
	return keep, findings
}

func (s *Sanitizer) checkAttr(tag, key, val string, refresh bool) (reason, host string, bad bool) {
	switch {
	case strings.HasPrefix(key, "on"):
		return "event handler attributes run script", "", true
	case key == "srcdoc":
		return "srcdoc embeds a whole document", "", true
	case key == "style":
		return s.checkCSS(val)
	case key == "content" && refresh:
		u := val
		if i := strings.Index(asciiLower(u), "url="); i >= 0 {
			u = strings.Trim(strings.TrimSpace(u[i+4:]), `'"`)
		} else {
			return "", "", false // a plain reload of the same page
		}
		if r, bad := s.check(u); bad {
			return "refresh: " + r, hostOf(u), true
		}
	case srcsetAttrs[key]:
		for _, cand := range strings.Split(val, ",") {
			f := strings.Fields(cand)
			if len(f) == 0 {
				continue
			}
			if r, bad := s.check(f[0]); bad {
				return r, hostOf(f[0]), true
			}
		}
	case key == "ping":
		for _, u := range strings.Fields(val) {
			if r, bad := s.check(u); bad {
				return r, hostOf(u), true
			}
		}
	case urlAttrs[key] || strings.HasSuffix(key, ":href"):
		if r, bad := s.check(val); bad {
			return r, hostOf(val), true
		}
	}
	return "", "", false
}

// checkCSS finds the URLs a style sheet or style attribute would fetch:
// url(...), image-set("...") and @import "...". CSS escapes and
// expression() could hide one, so they are refused outright.
func (s *Sanitizer) checkCSS(css string) (reason, host string, bad bool) {
	if strings.ContainsRune(css, '\\') {
		return "CSS escapes are not allowed (they can hide a URL)", "", true
	}
	lower := asciiLower(css) // same length as css, so indexes agree
	if strings.Contains(lower, "expression(") || strings.Contains(lower, "behavior:") || strings.Contains(lower, "-moz-binding") {
		return "scripted CSS is not allowed", "", true
	}
	for _, u := range cssURLs(css, lower) {
		if r, bad := s.check(u); bad {
			return r, hostOf(u), true
		}
	}
	return "", "", false
}

// cssURLs extracts url(...) arguments and the strings of @import and
// image-set().
func cssURLs(css, lower string) []string {
	var out []string
	for i := 0; ; {
		j := strings.Index(lower[i:], "url(")
		if j < 0 {
			break
		}
		i += j + 4
		end := strings.IndexByte(css[i:], ')')
		if end < 0 {
			out = append(out, "//unterminated-url") // fail closed
			break
		}
		out = append(out, strings.Trim(strings.TrimSpace(css[i:i+end]), `'"`))
		i += end
	}
	for _, kw := range []string{"@import", "image-set(", "-webkit-image-set("} {
		for i := 0; ; {
			j := strings.Index(lower[i:], kw)
			if j < 0 {
				break
			}
			i += j + len(kw)
			rest := css[i:]
			for _, q := range []byte{'"', '\''} {
				if k := strings.IndexByte(rest, q); k >= 0 && k < 64 {
					if e := strings.IndexByte(rest[k+1:], q); e >= 0 {
						out = append(out, rest[k+1:k+1+e])
					}
				}
			}
		}
	}
	return out
}

// renderTag writes a start tag with the given attributes.
func renderTag(name string, attrs []xhtml.Attribute, selfClosing bool) string {
	var b strings.Builder
	b.WriteByte('<')
	b.WriteString(name)
	for _, a := range attrs {
		b.WriteByte(' ')
		if a.Namespace != "" {
			b.WriteString(a.Namespace)
			b.WriteByte(':')
		}
		b.WriteString(a.Key)
		b.WriteString(`="`)
		b.WriteString(html.EscapeString(a.Val))
		b.WriteByte('"')
	}
	if selfClosing {
		b.WriteString(" /")
	}
	b.WriteByte('>')
	return b.String()
}

// asciiLower lower-cases ASCII letters only, keeping every byte offset
// (strings.ToLower may change the length of invalid UTF-8).
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// duplicateAttr returns the name of an attribute that occurs twice in a
// raw start tag, scanning it the way the HTML tokenizer does.
func duplicateAttr(raw []byte) string {
	i := bytes.IndexAny(raw, " \t\n\f\r/")
	if i < 0 {
		return ""
	}
	seen := map[string]bool{}
	for i < len(raw) {
		for i < len(raw) && strings.IndexByte(" \t\n\f\r/", raw[i]) >= 0 {
			i++
		}
		if i >= len(raw) || raw[i] == '>' {
			return ""
		}
		start := i
		for i++; i < len(raw) && strings.IndexByte(" \t\n\f\r/=>", raw[i]) < 0; i++ {
		}
		key := asciiLower(string(raw[start:i]))
		if seen[key] {
			return key
		}
		seen[key] = true
		for i < len(raw) && strings.IndexByte(" \t\n\f\r", raw[i]) >= 0 {
			i++
		}
		if i >= len(raw) || raw[i] != '=' {
			continue
		}
		for i++; i < len(raw) && strings.IndexByte(" \t\n\f\r", raw[i]) >= 0; i++ {
		}
		if i < len(raw) && (raw[i] == '"' || raw[i] == '\'') {
			q := raw[i]
			end := bytes.IndexByte(raw[i+1:], q)
			if end < 0 {
				return ""
			}
			i += end + 2
			continue
		}
		for i < len(raw) && strings.IndexByte(" \t\n\f\r>", raw[i]) < 0 {
			i++
		}
	}
	return ""
}
