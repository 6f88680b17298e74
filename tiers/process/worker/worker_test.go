package worker

import (
	"bytes"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock"
)

func TestRequestFraming(t *testing.T) {
	wire := AppendRequest(nil, 512, 10, []byte(`{"kind":"expr","code":"x + 1","input":{"x":2}}`))
	req, err := ReadRequest(bytes.NewReader(wire))
	if err != nil {
		t.Fatal(err)
	}
	if req.MemoryMB != 512 || req.CPUSeconds != 10 || req.Job.Kind != airlock.KindExpr || req.Job.Code != "x + 1" || req.Job.Input["x"] != int64(2) {
		t.Fatalf("round trip: %+v", req)
	}
	for name, bad := range map[string]string{
		"no header":        `{"kind":"expr","code":"1"}`,
		"wrong magic":      "airlock-jobs 1 1\n{}",
		"one field":        "airlock-job 1\n{}",
		"negative memory":  "airlock-job -1 1\n{\"kind\":\"expr\",\"code\":\"1\"}",
		"unknown field":    "airlock-job 1 1\n{\"kind\":\"expr\",\"code\":\"1\",\"extra\":1}",
		"trailing data":    "airlock-job 1 1\n{\"kind\":\"expr\",\"code\":\"1\"}{}",
		"empty job":        "airlock-job 1 1\n",
		"header not ended": "airlock-job 1 1",
	} {
		if _, err := ReadRequest(strings.NewReader(bad)); err == nil {
			t.Errorf("%s: accepted %q", name, bad)
		}
	}
}
