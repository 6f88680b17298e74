package value

import "unicode/utf8"

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
