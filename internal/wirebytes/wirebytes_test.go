package wirebytes

import (
	"encoding/json"
	"testing"
	"unicode/utf8"
)

// TestForms: text is a string, anything else base64; both decode.
func TestForms(t *testing.T) {
	for s, want := range map[string]string{
		"":             `""`,
		"héllo <&>":    `"héllo <&>"`,
		"\x00\x01":     `"\u0000\u0001"`,
		"\xff":         `{"base64":"/w=="}`,
		"ok\xc3":       `{"base64":"b2vD"}`,
		"\xed\xa0\x80": `{"base64":"7aCA"}`, // a surrogate half: not UTF-8
	} {
		if got := string(Append(nil, s, false)); got != want {
			t.Errorf("%q: %s, want %s", s, got, want)
		}
		back, err := Decode([]byte(want))
		if err != nil || back != s {
			t.Errorf("%s decodes to %q, %v", want, back, err)
		}
	}
	for _, bad := range []string{`5`, `null`, `[]`, `{}`, `{"base64":"x"}`, `{"base64":"AA==","x":1}`, `{"base64":null}`, `{"base64":1}`, `{`} {
		if _, err := Decode([]byte(bad)); err == nil {
			t.Errorf("%s decoded", bad)
		}
	}
}

// FuzzRoundTrip: any bytes survive Append then Decode, and through
// encoding/json as a Text or a Map.
func FuzzRoundTrip(f *testing.F) {
	for _, s := range []string{"", "text", "\xff\xfe", "a\x00b", "\u2028"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		enc := Append(nil, s, true)
		if !json.Valid(enc) {
			t.Fatalf("invalid JSON %s", enc)
		}
		got, err := Decode(enc)
		if err != nil || got != s {
			t.Fatalf("%q → %s → %q, %v", s, enc, got, err)
		}
		data, err := json.Marshal(Map{"k": s})
		if err != nil {
			t.Fatal(err)
		}
		var m Map
		if err := json.Unmarshal(data, &m); err != nil || m["k"] != s {
			t.Fatalf("map %q → %s → %q, %v", s, data, m["k"], err)
		}
		if utf8.ValidString(s) && enc[0] != '"' {
			t.Fatalf("text %q not a string: %s", s, enc)
		}
	})
}
