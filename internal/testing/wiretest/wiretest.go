// Package wiretest helps test the wire forms: Fill sets every field of a
// value, so that a field a codec forgets shows up in a round trip.
package wiretest

import (
	"reflect"
	"strings"
	"time"
)

// Fill sets every field reachable from v to a non-zero value derived from
// n, so that a field the wire forgets shows up in a round trip.
func Fill(v reflect.Value, n *int) {
	*n++
	switch v.Kind() {
	case reflect.String:
		v.SetString(strings.Repeat("s", *n%5+1) + string(rune('a'+*n%26)))
	case reflect.Int, reflect.Int64:
		if v.Type() == reflect.TypeFor[time.Duration]() {
			v.SetInt(int64(*n) * int64(time.Millisecond))
		} else {
			v.SetInt(int64(*n) * 1001)
		}
	case reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		v.SetUint(uint64(*n) * 7919)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			v.SetBytes([]byte{0, 1, 2, byte(*n)})
			return
		}
		s := reflect.MakeSlice(v.Type(), 2, 2)
		for i := range 2 {
			Fill(s.Index(i), n)
		}
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		for range 2 {
			k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			Fill(k, n)
			if e.Kind() == reflect.Interface {
				e.Set(reflect.ValueOf(int64(*n)))
			} else {
				Fill(e, n)
			}
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(time.Date(2001, 2, 3, 4, 5, 6, *n, time.UTC)))
			return
		}
		for i := range v.NumField() {
			Fill(v.Field(i), n)
		}
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		Fill(p.Elem(), n)
		v.Set(p)
	case reflect.Interface:
		v.Set(reflect.ValueOf("any" + string(rune('a'+*n%26))))
	default:
		panic("Fill: unhandled kind " + v.Kind().String() + " in " + v.Type().String())
	}
}
