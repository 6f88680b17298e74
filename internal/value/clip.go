package value

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Clip cuts s to at most n bytes, on a UTF-8 boundary, and marks the cut
// with "...".
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "..."
	cut := max(n-len(mark), 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

// Line is s, text from the far side of a boundary (a sandbox's agent, a
// guest's console), made fit for one line of an error or a log: clipped
// to n bytes, and quoted, its escapes as Go writes them, when it holds a
// line break, a terminal escape or anything else that is not printable
// UTF-8.
func Line(s string, n int) string {
	s = Clip(s, n)
	if printable(s, false) {
		return s
	}
	return strconv.Quote(s)
}

// Escaped is s with what a terminal would not show as written (a byte
// that is not UTF-8, a character that is not printable: a line break, a
// terminal escape) written as Go escapes (\xff, \n, \x1b) in place; with
// lines, line breaks and tabs are kept. For messages that name what a
// user typed (an argument, a path), which are not quoted whole as Line's.
func Escaped(s string, lines bool) string {
	if printable(s, lines) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case odd(r, lines):
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// printable reports whether s is UTF-8 of printable characters only (and,
// with lines, line breaks and tabs).
func printable(s string, lines bool) bool {
	return utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool { return odd(r, lines) })
}

func odd(r rune, lines bool) bool {
	return !unicode.IsPrint(r) && !(lines && (r == '\n' || r == '\t'))
}
