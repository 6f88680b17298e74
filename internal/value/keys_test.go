package value

import (
	"bytes"
	"encoding/json"
	"testing"
)

var keyCases = map[string]string{ // JSON: the member given twice ("" for none)
	`{"a":1,"a":2}`:                          "a",
	`{"a":1,"\u0061":2}`:                     "a", // the same key, escaped
	`{"a":{"b":[0,{"c":1,"c":1}]}}`:          "a.b.c",
	`[[{"x":{}}],{"y":[{"z":0,"z":0}]}]`:     "y.z",
	`{"a":{"b":1},"c":{"b":1,"d":{},"d":1}}`: "c.d",
	`{"a":"}\"{","a":1}`:                     "a",
	`{"a\"b":1,"a\"b":2}`:                    `a"b`,
	"{\"\x96\":1,\"\x97\":2}":                "\uFFFD", // as the decoder reads bytes that are not UTF-8
	` { "k" : [ "k" , "k" ] , "k" : 0 } `:    "k",
	`{"k0":0,"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9,"k10":0,"k11":0,"k12":0,"k13":0,"k14":0,"k15":0,"k16":0,"k17":0,"k3":0}`: "k3",
	`{"a":1,"A":2}`:             "",
	`{"a":{"b":1},"c":{"b":1}}`: "",
	`[{"a":1},{"a":1}]`:         "",
	`{"a":"a","b":["a","a"]}`:   "",
	`{"x":{"y":1},"y":1}`:       "",
	`{"a":"\\","b":"\\\""}`:     "",
	`1`:                         "", `"s"`: "", `null`: "", `{}`: "", `[]`: "",
	`{"a":`: "", // not JSON: left to the decoder that reads it
}

func TestFirstDuplicateKey(t *testing.T) {
	for in, want := range keyCases {
		got := ""
		if dup := FirstDuplicateKey([]byte(in)); dup != nil {
			got = dup.Path
		}
		if got != want {
			t.Errorf("%s: got %q, want %q", in, got, want)
		}
	}
}

// FuzzFirstDuplicateKey: on valid JSON the scanner agrees with a walk of
// encoding/json's tokens.
func FuzzFirstDuplicateKey(f *testing.F) {
	for in := range keyCases {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) {
			return
		}
		got, want := "", byTokens(t, data)
		if dup := FirstDuplicateKey(data); dup != nil {
			got = dup.Path
		}
		if got != want {
			t.Fatalf("%q: scanner %q, tokens %q", data, got, want)
		}
	})
}

// byTokens is the first duplicated member by encoding/json's tokens.
func byTokens(t *testing.T, data []byte) string {
	dec := json.NewDecoder(bytes.NewReader(data))
	type frame struct {
		object, key  bool
		path, member string
		seen         map[string]bool
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return ""
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.object && top.key {
			if tok == json.Delim('}') {
				stack = stack[:len(stack)-1]
				continue
			}
			k := tok.(string)
			if top.seen[k] {
				return joinKey(top.path, k)
			}
			top.seen[k], top.key, top.member = true, false, joinKey(top.path, k)
			continue
		}
		here := ""
		switch {
		case top != nil && top.object:
			here, top.key = top.member, true
		case top != nil:
			here = top.path
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{object: true, key: true, path: here, seen: map[string]bool{}})
		case json.Delim('['):
			stack = append(stack, &frame{path: here})
		case json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
	}
}
