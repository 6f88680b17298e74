package airlock

import (
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
)

// MaxValueDepth bounds the nesting of values crossing the boundary.
const MaxValueDepth = 128

// CheckValue reports whether v is JSON-compatible: nil, bool, string, an
// integer (int, int64 or *big.Int), a finite float64, json.Number, []any or
// map[string]any of such values, nested at most MaxValueDepth deep.
func CheckValue(v any, depth int) error {
	if depth > MaxValueDepth {
		return fmt.Errorf("nested more than %d deep", MaxValueDepth)
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
			if depth >= MaxValueDepth || !plainScalar(e) {
				if err := CheckValue(e, depth+1); err != nil {
					return err
				}
			}
		}
	case map[string]any:
		for _, e := range x {
			if depth >= MaxValueDepth || !plainScalar(e) {
				if err := CheckValue(e, depth+1); err != nil {
					return err
				}
			}
		}
	default:
		return fmt.Errorf("%T is not a JSON-compatible value", v)
	}
	return nil
}

// plainScalar reports the values CheckValue accepts as they are (below the
// depth limit), so the loops above skip a call for most of a typical input.
func plainScalar(v any) bool {
	switch v.(type) {
	case nil, bool, string, int, int64:
		return true
	}
	return false
}

// ExportValue converts a value produced by an engine into JSON-compatible
// data: integers of every width become int64 (or *big.Int beyond int64),
// slices and arrays become []any, maps with string keys become
// map[string]any, times become RFC 3339 strings and durations their Go
// spelling. A value that cannot be represented (NaN, a function, a channel,
// a map with non-string keys) is an error that names it.
func ExportValue(v any) (any, error) {
	switch x := v.(type) { // the common scalars, without reflection
	case nil, bool, string, int64:
		return v, nil
	case int:
		return int64(x), nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, fmt.Errorf("value %v cannot be represented in JSON", x)
		}
		return v, nil
	}
	return exportValue(reflect.ValueOf(v), 0)
}

func exportValue(v reflect.Value, depth int) (any, error) {
	if depth > MaxValueDepth {
		return nil, fmt.Errorf("value nested more than %d deep", MaxValueDepth)
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
			return nil, fmt.Errorf("value %v cannot be represented in JSON", f)
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

// NormalizeInput turns json.Number values (as decoded with UseNumber) into
// int64 for integer literals, *big.Int for integer literals beyond int64,
// and float64 otherwise, so that `items[0] % 2` works on integral input.
func NormalizeInput(v any) (any, error) {
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
			n, err := NormalizeInput(e)
			if err != nil {
				return nil, err
			}
			x[i] = n
		}
	case map[string]any:
		for k, e := range x {
			n, err := NormalizeInput(e)
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
