package server

import (
	"reflect"
	"testing"

	"github.com/airlock-sandbox/airlock"
)

// quickJobs are bodies quickJob must take, and a few it must leave to the
// full decoder.
var quickJobs = []string{
	`{"kind":"expr","code":"a + b * 2","input":{"a":1,"b":2}}`,
	` { "kind" : "starlark" , "code" : "print('x')\nresult = \"q\\\\\/\"\t" } `,
	`{"kind":"command","argv":["echo","hi","é"],"stdin":"in","situation":"internal","lifecycle":"ephemeral","tier":"gvisor","seed":18446744073709551615}`,
	`{"kind":"expr","code":"x","input":{"l":[1,-2,3.5,1e3,-0,true,false,"s",[],{}],"m":{"n":{"o":[{"p":0.1}]}},"k":"v","K":"w"}}`,
	`{}`,
	`{"input":{}}`,
	`{"entry":"run","session":"s1","argv":[]}`,
	// Left to DecodeJob:
	`{"kind":"expr","Kind":"expr"}`, `{"kind":"expr","kind":"expr"}`, `{"kind":"expr","limits":{"wall_ms":5}}`,
	`{"kind":"\u0065xpr"}`, `{"kind":null}`, `{"input":null}`, `{"input":{"n":99999999999999999999}}`, `{"input":{"f":1e999}}`,
	`{"seed":-1}`, `{"seed":1.5}`, `{"kind":"expr"} x`, `{"kind":"expr",}`, `{"colour":"red"}`, `[]`, ``, `{"kind":"a` + "\xff" + `"}`,
	`{"input":{"k":"v","k":"w"}}`, `{"input":{"m":{"n":[{"o":1,"o":1}]}}}`,
	`{"input":[1]}`, `{"input":{"a":01}}`, `{"code":"` + "\x01" + `"}`,
}

// FuzzQuickJob: whatever quickJob accepts, DecodeJob decodes to the
// same job without error.
func FuzzQuickJob(f *testing.F) {
	for _, s := range quickJobs {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { agree(t, data) })
}

func agree(t *testing.T, data []byte) bool {
	t.Helper()
	quick, ok := quickJob(data)
	if !ok {
		return false
	}
	full, err := airlock.DecodeJob(data)
	if err != nil {
		t.Fatalf("quickJob took %q, DecodeJob refused it: %v", data, err)
	}
	if !reflect.DeepEqual(quick, full) {
		t.Fatalf("%q:\nquick %#v\n full %#v", data, quick, full)
	}
	return true
}

func TestQuickJob(t *testing.T) {
	took := 0
	for i, s := range quickJobs {
		ok := agree(t, []byte(s))
		if i < 7 && !ok {
			t.Errorf("quickJob left %q to the full decoder", s)
		}
		if i >= 7 && ok {
			t.Errorf("quickJob took %q", s)
		}
		if ok {
			took++
		}
	}
	if took != 7 {
		t.Errorf("quickJob took %d of the 7 common jobs", took)
	}
}
