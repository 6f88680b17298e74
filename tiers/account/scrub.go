package account

import (
	"encoding/base64"
	"encoding/hex"
	"maps"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock"
)

// Redacted replaces every resolved credential in what the executor returns.
const Redacted = "[credential redacted]"

// scrubber removes resolved values from output: each value as it is, in
// hex (either case) and in base64 (standard and URL alphabets, at each of
// the three alignments it can take inside a longer encoded text).
type scrubber struct {
	forms []string // longest first, so a longer form is not cut by a shorter one
}

func newScrubber(values []string) *scrubber {
	seen := map[string]bool{}
	var forms []string
	add := func(s string) {
		if len(s) >= 4 && !seen[s] {
			seen[s] = true
			forms = append(forms, s)
		}
	}
	for _, v := range values {
		add(v)
		h := hex.EncodeToString([]byte(v))
		add(h)
		add(strings.ToUpper(h))
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
			for k := range 3 {
				add(base64Core(enc, v, k))
			}
		}
	}
	// Longest first.
	slices.SortStableFunc(forms, func(a, b string) int { return len(b) - len(a) })
	return &scrubber{forms: forms}
}

// base64Core is the part of v's base64 encoding that does not depend on
// the k bytes before it or on what follows: the characters of the 3-byte
// groups that hold only v's bytes.
func base64Core(enc *base64.Encoding, v string, k int) string {
	b := make([]byte, k+len(v))
	copy(b[k:], v)
	full := enc.EncodeToString(b)
	start := []int{0, 2, 3}[k]
	end := 4 * (len(b) / 3)
	if end <= start {
		return ""
	}
	return full[start:end]
}

func (s *scrubber) text(t string) string {
	if len(s.forms) == 0 {
		return t
	}
	for _, f := range s.forms {
		if strings.Contains(t, f) {
			t = strings.ReplaceAll(t, f, Redacted)
		}
	}
	// Output cut at its limit may end inside a value: drop such a tail.
	for _, f := range s.forms {
		for n := len(f) - 1; n >= 4; n-- {
			if strings.HasSuffix(t, f[:n]) {
				t = t[:len(t)-n] + Redacted
				break
			}
		}
	}
	return t
}

func (s *scrubber) value(v any) any {
	switch x := v.(type) {
	case string:
		return s.text(x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = s.value(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[s.text(k)] = s.value(e)
		}
		return out
	}
	return v
}

// result scrubs every text a Result carries back to the caller.
func (s *scrubber) result(r *airlock.Result) {
	r.Stdout, r.Stderr = s.text(r.Stdout), s.text(r.Stderr)
	r.Value = s.value(r.Value)
	if r.Error != nil {
		e := *r.Error
		e.Message = s.text(e.Message)
		r.Error = &e
	}
	if r.Stopped != nil {
		st := *r.Stopped
		st.Detail = s.text(st.Detail)
		r.Stopped = &st
	}
	for i, d := range r.Decision {
		r.Decision[i] = s.text(d)
	}
	// Names left out of the collected files are the program's too.
	var skipped []string
	for _, l := range r.FilesSkipped {
		skipped = append(skipped, s.text(l))
	}
	if len(r.Files) > 0 {
		// Two names may be one once scrubbed (the value in one, its hex
		// in the other): the second is left out and said to be, not lost
		// silently. In name order, so that which one is kept is stable.
		files := make(map[string]string, len(r.Files))
		for _, name := range slices.Sorted(maps.Keys(r.Files)) {
			n := s.text(name)
			if _, ok := files[n]; ok {
				skipped = append(skipped, n+": another collected file has this name once credentials are redacted")
				continue
			}
			files[n] = s.text(r.Files[name])
		}
		r.Files = files
	}
	r.FilesSkipped = skipped
}
