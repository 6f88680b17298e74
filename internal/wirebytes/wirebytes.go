// Package wirebytes is the JSON form of bytes carried in a Go string (a
// job's files, a result's output and collected files): valid UTF-8 is a
// JSON string, anything else the object {"base64": "..."} (standard
// encoding), so that binary content crosses the wire intact rather than
// with its invalid bytes replaced by U+FFFD. Decoding takes either form.
package wirebytes

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/internal/jsonappend"
)

// Append appends s in its wire form, with HTML escaping as html says.
func Append(b []byte, s string, html bool) []byte {
	if utf8.ValidString(s) {
		return jsonappend.String(b, s, html)
	}
	b = append(b, `{"base64":"`...)
	b = base64.StdEncoding.AppendEncode(b, []byte(s))
	return append(b, `"}`...)
}

// AppendMap appends m as a JSON object, keys sorted (as encoding/json
// sorts them), each value in its wire form.
func AppendMap(b []byte, m map[string]string, html bool) []byte {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonappend.String(b, k, html)
		b = append(b, ':')
		b = Append(b, m[k], html)
	}
	return append(b, '}')
}

// Decode reads one value in either wire form: a JSON string, or an
// object whose only member is "base64".
func Decode(raw []byte) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "", errors.New("want a string or {\"base64\": ...}")
	}
	switch raw[0] {
	case '"':
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	case '{':
		var obj struct {
			Base64 *string `json:"base64"`
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&obj); err != nil {
			return "", fmt.Errorf("want {\"base64\": ...} and nothing else: %s", trimJSON(err))
		}
		if obj.Base64 == nil {
			return "", errors.New("want {\"base64\": ...}: no base64 member")
		}
		b, err := base64.StdEncoding.DecodeString(*obj.Base64)
		if err != nil {
			return "", fmt.Errorf("bad base64: %v", err)
		}
		return string(b), nil
	}
	return "", errors.New("want a string or {\"base64\": ...}")
}

// DecodeMap reads an object whose values are in either wire form; null
// is a nil map.
func DecodeMap(raw []byte) (map[string]string, error) {
	if string(bytes.TrimSpace(raw)) == "null" {
		return nil, nil
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(raw, &members); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, fmt.Errorf("want an object of files, got JSON %s", te.Value)
		}
		return nil, fmt.Errorf("want an object: %s", trimJSON(err))
	}
	m := make(map[string]string, len(members))
	for k, v := range members {
		s, err := Decode(v)
		if err != nil {
			return nil, fmt.Errorf("%q: %v", k, err)
		}
		m[k] = s
	}
	return m, nil
}

func trimJSON(err error) string {
	msg := err.Error()
	if after, ok := bytes.CutPrefix([]byte(msg), []byte("json: ")); ok {
		return string(after)
	}
	return msg
}

// Text is a string field in its wire form.
type Text string

// MarshalJSON writes t as [Append] does (HTML escaping is the caller's
// encoder's to apply).
func (t Text) MarshalJSON() ([]byte, error) { return Append(nil, string(t), false), nil }

// UnmarshalJSON reads either wire form.
func (t *Text) UnmarshalJSON(raw []byte) error {
	if string(bytes.TrimSpace(raw)) == "null" {
		return nil
	}
	s, err := Decode(raw)
	if err != nil {
		return err
	}
	*t = Text(s)
	return nil
}

// Map is a map of strings in their wire form.
type Map map[string]string

// MarshalJSON writes m as [AppendMap] does.
func (m Map) MarshalJSON() ([]byte, error) {
	if m == nil {
		return []byte("null"), nil
	}
	return AppendMap(nil, m, false), nil
}

// UnmarshalJSON reads either wire form for each value.
func (m *Map) UnmarshalJSON(raw []byte) error {
	d, err := DecodeMap(raw)
	if err != nil {
		return err
	}
	*m = d
	return nil
}
