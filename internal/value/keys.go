package value

import (
	"bytes"
	"encoding/json"
	"errors"
)

// DuplicateKey is an object, inside a value, that names one member twice.
// encoding/json keeps the last; a log, a proxy, an approver or another
// language's parser may keep the first, so the program would run on data
// nobody else read.
type DuplicateKey struct {
	Path string // the member, as dotted keys from the value's root
}

func (e *DuplicateKey) Error() string { return e.Path + ": given twice" }

// UniqueKeys reads the one JSON value at dec's position and reports a
// [*DuplicateKey] for the first object that names a member twice, at any
// depth. Keys that differ only in case are different keys. Errors of the
// JSON itself are returned as the decoder gives them.
func UniqueKeys(dec *json.Decoder, path string) error {
	type frame struct {
		seen   map[string]bool // nil for an array
		key    bool            // an object's next token is a key
		path   string
		member string // path of the member being read
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.seen != nil && top.key {
			if tok == json.Delim('}') {
				stack = stack[:len(stack)-1]
				if len(stack) == 0 {
					return nil
				}
				continue
			}
			k, _ := tok.(string)
			top.member = joinKey(top.path, k)
			if top.seen[k] {
				return &DuplicateKey{Path: top.member}
			}
			top.seen[k] = true
			top.key = false
			continue
		}
		here := path
		switch {
		case top != nil && top.seen != nil:
			here = top.member
			top.key = true // after this value, a key or the end
		case top != nil:
			here = top.path // an array's elements
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{seen: map[string]bool{}, key: true, path: here})
		case json.Delim('['):
			stack = append(stack, &frame{path: here})
		case json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		if len(stack) == 0 {
			return nil
		}
	}
}

// FirstDuplicateKey is [UniqueKeys] over one encoded value: the first
// member named twice, or nil. What is not JSON is left to the decoder that
// reads it.
func FirstDuplicateKey(data []byte) *DuplicateKey {
	var dup *DuplicateKey
	if errors.As(UniqueKeys(json.NewDecoder(bytes.NewReader(data)), ""), &dup) {
		return dup
	}
	return nil
}

func joinKey(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
