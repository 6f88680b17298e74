package airlock

import (
	"reflect"
	"testing"
)

// TestWireMirrors: the wire structs have Job's and Result's members, in
// their order, with their tags (the conversions fail to compile when a
// field is added; this catches a renamed tag).
func TestWireMirrors(t *testing.T) {
	for _, pair := range [][2]reflect.Type{
		{reflect.TypeFor[Job](), reflect.TypeFor[jobWire]()},
		{reflect.TypeFor[Result](), reflect.TypeFor[resultWire]()},
	} {
		a, b := pair[0], pair[1]
		if a.NumField() != b.NumField() {
			t.Fatalf("%s has %d fields, %s %d", a, a.NumField(), b, b.NumField())
		}
		for i := range a.NumField() {
			fa, fb := a.Field(i), b.Field(i)
			if fa.Name != fb.Name || fa.Tag.Get("json") != fb.Tag.Get("json") {
				t.Errorf("%s.%s %q vs %s.%s %q", a, fa.Name, fa.Tag.Get("json"), b, fb.Name, fb.Tag.Get("json"))
			}
		}
	}
}
