package value

import (
	"encoding/json"
	"unicode/utf8"
)

// DuplicateKey is an object, inside a value, that names one member twice.
// encoding/json keeps the last; a log, a proxy, an approver or another
// language's parser may keep the first, so the program would run on data
// nobody else read.
type DuplicateKey struct {
	Path string // the member, as dotted keys from the value's root
}

func (e *DuplicateKey) Error() string { return e.Path + ": given twice" }

// FirstDuplicateKey returns the first member named twice in one object of
// the JSON value data, at any depth, or nil. Keys that differ only in case
// are different keys; keys are compared as encoding/json decodes them. data is
// scanned, not decoded (a job's input may be tens of megabytes): what is
// not JSON is left to the decoder that reads it, and may give nil.
func FirstDuplicateKey(data []byte) *DuplicateKey {
	var stack []*keyFrame
	top := func() *keyFrame {
		if len(stack) == 0 {
			return nil
		}
		return stack[len(stack)-1]
	}
	childPath := func() string {
		switch f := top(); {
		case f == nil:
			return ""
		case f.object:
			return f.member
		default:
			return f.path
		}
	}
	for i := 0; i < len(data); i++ {
		switch c := data[i]; c {
		case '{':
			stack = append(stack, &keyFrame{object: true, wantKey: true, path: childPath()})
		case '[':
			stack = append(stack, &keyFrame{path: childPath()})
		case '}', ']':
			if len(stack) == 0 {
				return nil
			}
			stack = stack[:len(stack)-1]
		case ',':
			if f := top(); f != nil && f.object {
				f.wantKey = true
			}
		case '"':
			end, escaped := stringEnd(data, i)
			if end < 0 {
				return nil
			}
			if f := top(); f != nil && f.object && f.wantKey {
				f.wantKey = false
				var key string
				if escaped || !utf8.Valid(data[i+1:end]) {
					// As the decoder reads it: escapes decoded, bytes
					// that are not UTF-8 each U+FFFD.
					if json.Unmarshal(data[i:end+1], &key) != nil {
						return nil
					}
				} else {
					key = string(data[i+1 : end])
				}
				if f.seen(key) {
					return &DuplicateKey{Path: joinKey(f.path, key)}
				}
				f.member = joinKey(f.path, key)
			}
			i = end
		}
	}
	return nil
}

// keyFrame is an object or array FirstDuplicateKey is inside.
type keyFrame struct {
	object  bool
	wantKey bool     // an object's next string is a key
	path    string   // this value's
	member  string   // the member being read, for an object
	keys    []string // an object's keys so far, while they are few
	set     map[string]bool
}

// seen records key among an object's keys, reporting whether it was
// there already. Most objects have a few keys: a list is cheaper than a
// map until it grows.
func (f *keyFrame) seen(key string) bool {
	if f.set == nil {
		for _, k := range f.keys {
			if k == key {
				return true
			}
		}
		if len(f.keys) < 16 {
			f.keys = append(f.keys, key)
			return false
		}
		f.set = make(map[string]bool, 2*len(f.keys))
		for _, k := range f.keys {
			f.set[k] = true
		}
		f.keys = nil
	}
	if f.set[key] {
		return true
	}
	f.set[key] = true
	return false
}

// stringEnd returns the index of the quote that ends the string starting
// at data[start], and whether it holds an escape; -1 if it does not end.
func stringEnd(data []byte, start int) (int, bool) {
	escaped := false
	for j := start + 1; j < len(data); j++ {
		switch data[j] {
		case '\\':
			escaped = true
			j++
		case '"':
			return j, escaped
		}
	}
	return -1, escaped
}

func joinKey(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
