// Package jsonkeys refuses what encoding/json lets through when it decodes
// a configuration into a struct: a member given twice in one object, where
// the last silently wins, and a member named in another case than its
// field ("Min_Level" for "min_level"), which it matches anyway. Either lets
// a file read one way by the person who reviews it and another by airlock.
package jsonkeys

import (
	"bytes"
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/value"
)

// Check returns an error naming the first member of data, a JSON value to
// be decoded into a value of type t, that is given twice in its object or
// that matches a field of t only when case is ignored; nil otherwise, also
// for data that is not JSON (left to the decoder). Values of types that
// decode themselves (json.Unmarshaler, encoding.TextUnmarshaler) and of
// interface types are not looked into.
func Check(data []byte, t reflect.Type) error {
	if dup := value.FirstDuplicateKey(data); dup != nil {
		return fmt.Errorf("%s", dup.Error())
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return nil
	}
	return walk(v, t, "")
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

func walk(v any, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() == reflect.Interface || reflect.PointerTo(t).Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler) {
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		obj, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		fields := map[string]reflect.Type{}
		collect(t, fields)
		for _, k := range sortedKeys(obj) {
			x := obj[k]
			ft, ok := fields[k]
			if !ok {
				for name := range fields {
					if strings.EqualFold(name, k) {
						return fmt.Errorf("%s: write the field as %q", join(path, k), name)
					}
				}
				continue // unknown: the decoder names it
			}
			if err := walk(x, ft, join(path, k)); err != nil {
				return err
			}
		}
	case reflect.Slice, reflect.Array:
		if list, ok := v.([]any); ok {
			for i, x := range list {
				if err := walk(x, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
					return err
				}
			}
		}
	case reflect.Map:
		if obj, ok := v.(map[string]any); ok {
			for _, k := range sortedKeys(obj) {
				if err := walk(obj[k], t.Elem(), join(path, k)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// collect adds the JSON member names of struct t's fields, with those of
// embedded structs without a name of their own, as encoding/json does.
func collect(t reflect.Type, fields map[string]reflect.Type) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				collect(ft, fields)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fields[name] = f.Type
	}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func sortedKeys(obj map[string]any) []string {
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
