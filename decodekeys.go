package airlock

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/value"
)

// checkKeys walks a job that decoded and refuses what encoding/json lets
// through: a member name in another case than the field's ("Kind" for
// "kind"), which it matches anyway, and a member given twice, where the
// last one silently wins. Either lets a job read one way by a proxy, a log
// or a person and another by airlock. Inside input, which is the code's
// data, keys are matched exactly, and a key given twice is refused too.
func checkKeys(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	return walkKeys(dec, reflect.TypeFor[jobWire](), "")
}

var (
	timeType    = reflect.TypeFor[time.Time]()
	bytesType   = reflect.TypeFor[[]byte]()
	filesType   = reflect.TypeFor[filesWire]()
	anyMapType  = reflect.TypeFor[map[string]any]()
	inputType   = reflect.TypeFor[inputWire]()
	jsonRawType = reflect.TypeFor[json.RawMessage]()
)

func walkKeys(dec *json.Decoder, t reflect.Type, path string) error {
	switch {
	case t == anyMapType || t == inputType:
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return err
		}
		if dup := value.FirstDuplicateKey(raw); dup != nil {
			return invalid(join(path, dup.Path), "given twice")
		}
		return nil
	case t == timeType || t == bytesType || t == jsonRawType:
		return skipValue(dec)
	case t.Kind() == reflect.Struct:
		return walkObject(dec, path, func(key string) (reflect.Type, error) {
			for i := range t.NumField() {
				f := t.Field(i)
				name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
				if name == key {
					return f.Type, nil
				}
			}
			return nil, invalid(join(path, key), "unknown field (field names are lower case, as documented)")
		})
	case t == filesType:
		return walkObject(dec, path, func(string) (reflect.Type, error) { return jsonRawType, nil })
	case t.Kind() == reflect.Map:
		return walkObject(dec, path, func(string) (reflect.Type, error) { return t.Elem(), nil })
	case t.Kind() == reflect.Slice:
		tok, err := dec.Token()
		if err != nil || tok != json.Delim('[') {
			return err // null, or what the decoder already accepted
		}
		for dec.More() {
			if err := walkKeys(dec, t.Elem(), path); err != nil {
				return err
			}
		}
		_, err = dec.Token()
		return err
	}
	return skipValue(dec)
}

// walkObject walks an object whose member types field returns, refusing a
// member named twice.
func walkObject(dec *json.Decoder, path string, field func(string) (reflect.Type, error)) error {
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		return err // null
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		if seen[key] {
			return invalid(join(path, key), "given twice")
		}
		seen[key] = true
		t, err := field(key)
		if err != nil {
			return err
		}
		if err := walkKeys(dec, t, join(path, key)); err != nil {
			return err
		}
	}
	_, err = dec.Token()
	return err
}

func skipValue(dec *json.Decoder) error {
	var raw json.RawMessage
	return dec.Decode(&raw)
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
