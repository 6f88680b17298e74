// Package value checks, converts and exports the JSON-compatible values that
// cross a sandbox boundary (job input, results), and holds the wire
// format's size bounds.
package value

import (
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
)

// MaxDepth bounds the nesting of values crossing the boundary.
const MaxDepth = 128

// MaxJobBytes bounds the size of an encoded job.
const MaxJobBytes = 32 << 20

// MaxSeed bounds generated seeds to integers every JSON reader keeps exactly.
const MaxSeed = 1<<53 - 1

// NewSeed returns a random non-zero seed no larger than [MaxSeed]. Seeds
// make runs replayable; they are not secrets.
func NewSeed() uint64 {
	for {
		// 53 random bits, uniform over [1, MaxSeed] once zero is redrawn.
		if s := rand.Uint64() >> (64 - 53); s != 0 {
			return s
		}
	}
}

// Check reports whether v is JSON-compatible: nil, bool, string, an
// integer (int, int64 or *big.Int), a finite float64, json.Number, []any or
// map[string]any of such values, nested at most MaxDepth deep.
func Check(v any, depth int) error {
	if depth > MaxDepth {
		return fmt.Errorf("nested more than %d deep", MaxDepth)
	}
	switch x := v.(type) {
	case nil, bool, string, int, int64, json.Number:
	case *big.Int:
		if x == nil {
			return fmt.Errorf("nil integer")
		}
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return fmt.Errorf("%v is not a JSON number", x)
		}
	case []any:
		for _, e := range x {
			if depth >= MaxDepth || !plainScalar(e) {
				if err := Check(e, depth+1); err != nil {
					return err
				}
			}
		}
	case map[string]any:
		for _, e := range x {
			if depth >= MaxDepth || !plainScalar(e) {
				if err := Check(e, depth+1); err != nil {
					return err
				}
			}
		}
	default:
		return fmt.Errorf("%T is not a JSON-compatible value", v)
	}
	return nil
}

// plainScalar reports the values Check accepts as they are (below the
// depth limit), so the loops above skip a call for most of a typical input.
func plainScalar(v any) bool {
	switch v.(type) {
	case nil, bool, string, int, int64:
		return true
	}
	return false
}

// Export converts a value produced by an engine into JSON-compatible
// data: integers of every width become int64 (or *big.Int beyond int64),
// slices and arrays become []any, maps with string keys become
// map[string]any, times become RFC 3339 strings and durations their Go
// spelling. A value that cannot be represented (NaN, a function, a channel,
// a map with non-string keys) is an error that names it.
func Export(v any) (any, error) {
	switch x := v.(type) { // the common scalars, without reflection
	case nil, bool, string, int64:
		return v, nil
	case int:
		return int64(x), nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, NonFinite(x)
		}
		return v, nil
	}
	return exportValue(reflect.ValueOf(v), 0)
}

func exportValue(v reflect.Value, depth int) (any, error) {
	if depth > MaxDepth {
		return nil, fmt.Errorf("value nested more than %d deep", MaxDepth)
	}
	if !v.IsValid() {
		return nil, nil
	}
	switch x := v.Interface().(type) {
	case time.Time:
		return x.Format(time.RFC3339Nano), nil
	case time.Duration:
		return x.String(), nil
	case *big.Int:
		if x == nil {
			return nil, nil
		}
		if x.IsInt64() {
			return x.Int64(), nil
		}
		return new(big.Int).Set(x), nil
	case json.Number:
		return x, nil
	}
	switch v.Kind() {
	case reflect.Bool:
		return v.Bool(), nil
	case reflect.String:
		return v.String(), nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return v.Int(), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		u := v.Uint()
		if u <= math.MaxInt64 {
			return int64(u), nil
		}
		return new(big.Int).SetUint64(u), nil
	case reflect.Float32, reflect.Float64:
		f := v.Float()
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, NonFinite(f)
		}
		return f, nil
	case reflect.Interface, reflect.Pointer:
		if v.IsNil() {
			return nil, nil
		}
		return exportValue(v.Elem(), depth+1)
	case reflect.Slice, reflect.Array:
		if v.Kind() == reflect.Slice && v.IsNil() {
			return []any{}, nil
		}
		out := make([]any, v.Len())
		for i := range out {
			e, err := exportValue(v.Index(i), depth+1)
			if err != nil {
				return nil, err
			}
			out[i] = e
		}
		return out, nil
	case reflect.Map:
		if v.Type().Key().Kind() != reflect.String {
			return nil, fmt.Errorf("map with %s keys cannot be represented in JSON", v.Type().Key())
		}
		out := make(map[string]any, v.Len())
		it := v.MapRange()
		for it.Next() {
			e, err := exportValue(it.Value(), depth+1)
			if err != nil {
				return nil, err
			}
			out[it.Key().String()] = e
		}
		return out, nil
	}
	return nil, fmt.Errorf("value of type %s cannot be represented in JSON", v.Type())
}

// NonFinite is the error of a result that is NaN or an infinity, which
// JSON has no number for, with what usually makes one.
func NonFinite(f float64) error {
	why := "a float overflow, or a division by zero"
	if math.IsNaN(f) {
		why = "an undefined operation such as 0.0/0.0"
	}
	return fmt.Errorf("value %v cannot be represented in JSON (%s)", f, why)
}

// Normalize turns json.Number values (as decoded with UseNumber) into
// int64 for integer literals, *big.Int for integer literals beyond int64,
// and float64 otherwise, so that `items[0] % 2` works on integral input.
func Normalize(v any) (any, error) {
	switch x := v.(type) {
	case json.Number:
		s := string(x)
		if !strings.ContainsAny(s, ".eE") {
			if i, err := strconv.ParseInt(s, 10, 64); err == nil {
				return i, nil
			}
			if b, ok := new(big.Int).SetString(s, 10); ok {
				return b, nil
			}
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsInf(f, 0) {
			return nil, fmt.Errorf("number %s out of range", s)
		}
		return f, nil
	case []any:
		for i, e := range x {
			n, err := Normalize(e)
			if err != nil {
				return nil, err
			}
			x[i] = n
		}
	case map[string]any:
		for k, e := range x {
			n, err := Normalize(e)
			if err != nil {
				return nil, err
			}
			x[k] = n
		}
	}
	return v, nil
}

// SortedKeys returns a map's keys in order, for deterministic iteration.
func SortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

type pathError string

func (e pathError) Error() string { return string(e) }

// CheckPathPattern checks one entry of a net rule's paths: an absolute path,
// optionally ending in "*" (a prefix), or "*" followed by an absolute path
// (a suffix); printable ASCII, no query, fragment, percent sign,
// semicolon (a request path holding one is refused), empty, "." or ".."
// segment.
func CheckPathPattern(p string) error {
	body := p
	switch {
	case strings.HasPrefix(p, "*"):
		body = p[1:]
	case strings.HasSuffix(p, "*"):
		body = p[:len(p)-1]
	}
	if !strings.HasPrefix(body, "/") {
		return pathError("want an absolute path, \"/prefix/*\" or \"*/suffix\"")
	}
	for i := 0; i < len(body); i++ {
		if c := body[i]; c <= ' ' || c >= 0x7f || c == '*' || c == '?' || c == '#' || c == '%' || c == '\\' || c == ';' {
			return pathError("only printable ASCII without spaces, '*' (at one end), '?', '#', '%', ';' or '\\'")
		}
	}
	for _, seg := range strings.Split(body[1:], "/") {
		if seg == "." || seg == ".." {
			return pathError("no '.' or '..' segments")
		}
	}
	if strings.Contains(body, "//") {
		return pathError("no empty segments ('//')")
	}
	return nil
}
