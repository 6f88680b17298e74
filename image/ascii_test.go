//go:build linux

package image

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestReferenceNotASCIIRefused: a reference's registry may be written
// with look-alike letters (Cyrillic, fullwidth), a bidi override that
// shows it reordered, or a C1 control a terminal acts on: each would be
// shown to an approver, a terminal or the audit log as what it is not,
// and pulled from another host (the look-alike's punycode name). Such a
// reference is refused as invalid before any request, and the error shows
// it escaped.
func TestReferenceNotASCIIRefused(t *testing.T) {
	f := newFixture(t, Options{})
	d := "@sha256:" + strings.Repeat("ab", 32)
	for _, ref := range []string{
		"l\u043ecalhost:5000/team/tool" + d,     // Cyrillic o
		"\uff4cocalhost:5000/team/tool" + d,     // fullwidth l
		"localhost\u202e:5000/team/tool" + d,    // right-to-left override
		"\u009b31mlocalhost:5000/team/tool" + d, // C1 CSI
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, _, aerr := f.s.Acquire(ctx, ref)
		_, perr := f.s.Pull(ctx, ref)
		cerr := f.s.Check(ref)
		cancel()
		for what, err := range map[string]error{"Acquire": aerr, "Pull": perr, "Check": cerr} {
			if err == nil {
				t.Errorf("%s(%q) accepted it", what, ref)
				continue
			}
			imageError(t, err, true, "not ASCII")
			if i := strings.IndexFunc(err.Error(), func(r rune) bool { return r < ' ' || r > '~' }); i >= 0 {
				t.Errorf("%s(%q): the error shows it unescaped: %q", what, ref, err)
			}
		}
	}
	f.tmpEmpty()
}
