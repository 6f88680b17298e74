package value

import (
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
	if utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) {
		return s
	}
	return strconv.Quote(s)
}
