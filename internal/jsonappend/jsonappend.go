// Package jsonappend encodes JSON values by appending to a byte slice,
// without reflection for the common cases, and byte for byte as
// encoding/json writes them: with html set as json.Marshal does (<, > and
// & escaped), without it as an Encoder with SetEscapeHTML(false). Whatever
// is not a common simple case (a string that needs escaping, a float, a
// big integer, a type it does not know) is handed to encoding/json, so the
// two cannot disagree; FuzzValue holds them to that.
package jsonappend

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"sync"
	"time"
)

// jsonBufs are the buffers of the fallback encoder.
var jsonBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// Any appends v as encoding/json writes it.
func Any(b []byte, v any, html bool) ([]byte, error) {
	buf := jsonBufs.Get().(*bytes.Buffer)
	defer jsonBufs.Put(buf)
	buf.Reset()
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(html)
	if err := enc.Encode(v); err != nil {
		return b, err
	}
	return append(b, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))...), nil
}

// plain reports whether s needs no escaping in JSON: printable ASCII
// without quote or backslash (and, for html, without <, > and &).
func plain(s string, html bool) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' || html && (c == '<' || c == '>' || c == '&') {
			return false
		}
	}
	return true
}

// String appends s as a JSON string. It cannot fail.
func String(b []byte, s string, html bool) []byte {
	if plain(s, html) {
		b = append(b, '"')
		b = append(b, s...)
		return append(b, '"')
	}
	b, _ = Any(b, s, html)
	return b
}

// Strings appends a list of strings (HTML escaping off).
func Strings(b []byte, list []string) []byte {
	b = append(b, '[')
	for i, s := range list {
		if i > 0 {
			b = append(b, ',')
		}
		b = String(b, s, false)
	}
	return append(b, ']')
}

// Time appends t as time.Time's MarshalJSON does (RFC 3339 with
// nanoseconds, quoted).
func Time(b []byte, t time.Time) ([]byte, error) {
	if y := t.Year(); t.Location() == time.UTC && y >= 0 && y <= 9999 {
		b = append(b, '"')
		b = t.AppendFormat(b, time.RFC3339Nano)
		return append(b, '"'), nil
	}
	return Any(b, t, false)
}

// Value appends a JSON-compatible value: what DecodeJob leaves in a
// job's input (nil, bool, string, int64, float64, *big.Int, []any,
// map[string]any) and what the interpreters return. With html, strings are
// escaped as json.Marshal escapes them.
func Value(b []byte, v any, html bool) ([]byte, error) { return value(b, v, html, false) }

// Typed is Value, except that a float whose JSON would have no fraction or
// exponent gets ".0": 1.0 and 1 are a float and an integer to a program,
// and encoding/json writes both as 1. What DecodeJob reads back is then
// the value that was written, type and all.
func Typed(b []byte, v any, html bool) ([]byte, error) { return value(b, v, html, true) }

func value(b []byte, v any, html, typed bool) ([]byte, error) {
	var err error
	switch x := v.(type) {
	case float64, float32:
		start := len(b)
		if b, err = Any(b, x, html); err == nil && typed && !bytes.ContainsAny(b[start:], ".eE") {
			b = append(b, ".0"...)
		}
		return b, err
	case nil:
		return append(b, "null"...), nil
	case bool:
		return strconv.AppendBool(b, x), nil
	case string:
		return String(b, x, html), nil
	case int:
		return strconv.AppendInt(b, int64(x), 10), nil
	case int64:
		return strconv.AppendInt(b, x, 10), nil
	case []any:
		if x == nil {
			return append(b, "null"...), nil
		}
		b = append(b, '[')
		for i, e := range x {
			if i > 0 {
				b = append(b, ',')
			}
			if b, err = value(b, e, html, typed); err != nil {
				return b, err
			}
		}
		return append(b, ']'), nil
	case map[string]any:
		if x == nil {
			return append(b, "null"...), nil
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = String(b, k, html)
			b = append(b, ':')
			if b, err = value(b, x[k], html, typed); err != nil {
				return b, err
			}
		}
		return append(b, '}'), nil
	}
	return Any(b, v, html)
}
