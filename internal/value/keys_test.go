package value

import "testing"

func TestUniqueKeys(t *testing.T) {
	twice := map[string]string{
		`{"a":1,"a":2}`:                          "a",
		`{"a":1,"\u0061":2}`:                     "a", // the same key, escaped
		`{"a":{"b":[0,{"c":1,"c":1}]}}`:          "a.b.c",
		`[[{"x":{}}],{"y":[{"z":0,"z":0}]}]`:     "y.z",
		`{"a":{"b":1},"c":{"b":1,"d":{},"d":1}}`: "c.d",
	}
	for in, path := range twice {
		if dup := FirstDuplicateKey([]byte(in)); dup == nil || dup.Path != path {
			t.Errorf("%s: got %v, want %s given twice", in, dup, path)
		}
	}
	for _, in := range []string{
		`{"a":1,"A":2}`, `{"a":{"b":1},"c":{"b":1}}`, `[{"a":1},{"a":1}]`, `1`, `"s"`, `null`, `{}`, `[]`,
		`{"a":`, // not JSON: left to the decoder that reads it
	} {
		if dup := FirstDuplicateKey([]byte(in)); dup != nil {
			t.Errorf("%s: %v", in, dup)
		}
	}
}
