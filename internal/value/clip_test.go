package value

import "testing"

func TestLine(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"plain text, é", 100, "plain text, é"},
		{"two\nlines", 100, `"two\nlines"`},
		{"\x1b[2Jforged", 100, `"\x1b[2Jforged"`},
		{"nul\x00", 100, `"nul\x00"`},
		{"bad \xff utf-8", 100, `"bad \xff utf-8"`},
		{"0123456789", 7, "0123..."},
		{"a\nbcdefghij", 7, `"a\nbc..."`},
	} {
		if got := Line(c.in, c.n); got != c.want {
			t.Errorf("Line(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}

func TestEscaped(t *testing.T) {
	for in, want := range map[string][2]string{
		"plain path":          {"plain path", "plain path"},
		"a\nb\x1b[2J\xff":     {`a\nb\x1b[2J\xff`, "a\nb\\x1b[2J\\xff"},
		"tab\there \u202eRLO": {`tab\there \u202eRLO`, "tab\there \\u202eRLO"},
	} {
		if got := Escaped(in, false); got != want[0] {
			t.Errorf("Escaped(%q, false) = %q, want %q", in, got, want[0])
		}
		if got := Escaped(in, true); got != want[1] {
			t.Errorf("Escaped(%q, true) = %q, want %q", in, got, want[1])
		}
	}
}
