package jsonappend

import (
	"bytes"
	"encoding/json"
	"math/big"
	"testing"
	"time"
)

// awkward are strings that take every escaping path of encoding/json.
var awkward = []string{"", "plain text", `quote " and \ backslash`, "<b>&amp;</b>", "tab\tnew\nline\r",
	"\x00\x01\x1f\x7f", "é ü 漢字 🙂", "bad \xff\xfe utf-8", "line\u2028sep\u2029", "a\bb\fc"}

func std(t testing.TB, v any, html bool) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(html)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

func same(t testing.TB, v any) {
	t.Helper()
	for _, html := range []bool{false, true} {
		got, err := Value(nil, v, html)
		if err != nil {
			t.Fatal(err)
		}
		if want := std(t, v, html); !bytes.Equal(got, want) {
			t.Errorf("html=%v:\n got %s\nwant %s", html, got, want)
		}
	}
}

func TestValueMatchesEncodingJSON(t *testing.T) {
	values := []any{nil, true, false, int64(-7), 3, 2.5, 1e21, new(big.Int).Lsh(big.NewInt(1), 80), []any{}, []any(nil),
		map[string]any{}, map[string]any(nil), map[string]int{"x": 1}, time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC),
		map[string]any{"b": []any{int64(1), nil, "<s>", map[string]any{"k": false}}, "a": 1.5}}
	for _, s := range awkward {
		values = append(values, s, map[string]any{s: []any{s}})
	}
	for _, v := range values {
		same(t, v)
	}
	if got, want := Strings(nil, awkward), std(t, awkward, false); !bytes.Equal(got, want) {
		t.Errorf("strings:\n got %s\nwant %s", got, want)
	}
}

func FuzzValue(f *testing.F) {
	for _, s := range awkward {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		same(t, map[string]any{s: []any{s, int64(len(s))}})
	})
}

// Typed keeps a whole float a float; everything else is Value's.
func TestTyped(t *testing.T) {
	in := map[string]any{"f": 1.0, "i": int64(1), "l": []any{2.0, 2.5, 1e21, float32(3)}, "s": "<x>"}
	got, err := Typed(nil, in, true)
	if want := `{"f":1.0,"i":1,"l":[2.0,2.5,1e+21,3.0],"s":"\u003cx\u003e"}`; err != nil || string(got) != want {
		t.Errorf("Typed: %s %v, want %s", got, err, want)
	}
	plain, _ := Value(nil, in, true)
	if want := `{"f":1,"i":1,"l":[2,2.5,1e+21,3],"s":"\u003cx\u003e"}`; string(plain) != want {
		t.Errorf("Value: %s, want %s", plain, want)
	}
}
