package sanitize

import (
	"bytes"
	"strings"
	"testing"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/text"
)

// benchDoc is a README-like document: headings, prose, lists, code, a
// table, allowed and offending links and images, and raw HTML.
func benchDoc() []byte {
	var b strings.Builder
	for i := 0; i < 40; i++ {
		b.WriteString("## Section\n\nSome *prose* with `code`, a [link](https://docs.example.com/page) and https://docs.example.com/bare.\n\n")
		b.WriteString("- item one\n- item ![img](https://docs.example.com/a.png \"t\")\n- item [ref][r]\n\n")
		b.WriteString("| a | b |\n|---|---|\n| 1 | ![x](https://evil.example/?q=SECRET) |\n\n")
		b.WriteString("```go\nfunc main() { println(\"<img src=x>\") }\n```\n\n")
		b.WriteString("<p align=\"center\"><img src=\"https://docs.example.com/logo.png\" width=\"10\"></p>\n\n")
	}
	b.WriteString("[r]: https://docs.example.com/ref\n")
	return []byte(b.String())
}

// BenchmarkSanitize compares goldmark parsing the document (raw) and
// rendering it to HTML with the sanitiser's pass over it.
func BenchmarkSanitize(b *testing.B) {
	doc := benchDoc()
	md := goldmark.New(goldmark.WithExtensions(extension.GFM))
	b.Run("raw-parse", func(b *testing.B) {
		b.SetBytes(int64(len(doc)))
		for b.Loop() {
			md.Parser().Parse(text.NewReader(doc))
		}
	})
	b.Run("raw-render", func(b *testing.B) {
		b.SetBytes(int64(len(doc)))
		var buf bytes.Buffer
		for b.Loop() {
			buf.Reset()
			if err := md.Convert(doc, &buf); err != nil {
				b.Fatal(err)
			}
		}
	})
	s, err := New("docs.example.com")
	if err != nil {
		b.Fatal(err)
	}
	b.Run("sanitize", func(b *testing.B) {
		b.SetBytes(int64(len(doc)))
		for b.Loop() {
			out, f := s.Markdown(doc)
			if len(f) == 0 || bytes.Contains(out, []byte("SECRET")) {
				b.Fatal("not sanitised")
			}
		}
	})
	clean := bytes.ReplaceAll(doc, []byte("evil.example"), []byte("docs.example.com"))
	b.Run("sanitize-clean", func(b *testing.B) {
		b.SetBytes(int64(len(clean)))
		for b.Loop() {
			if out, _ := s.Markdown(clean); !bytes.Equal(out, clean) {
				b.Fatal("changed a clean document")
			}
		}
	})
}
