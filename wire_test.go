package airlock_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock"
)

// binary256 is every byte value once: not valid UTF-8.
func binary256() string {
	b := make([]byte, 256)
	for i := range b {
		b[i] = byte(i)
	}
	return string(b)
}

// TestJobFilesWire: a binary file goes out as {"base64": ...}, a text
// file as a string, and both come back byte for byte through DecodeJob
// and json.Unmarshal.
func TestJobFilesWire(t *testing.T) {
	job := airlock.Job{Kind: airlock.KindCommand, Argv: []string{"cat"}, Collect: []string{"out/*.bin"},
		Files: map[string]string{"bin": binary256(), "text.txt": "héllo <&>\n", "empty": ""}}
	data, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	var raw struct {
		Files   map[string]json.RawMessage `json:"files"`
		Collect []string                   `json:"collect"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(raw.Files["bin"]), `{"base64":"AAECAwQF`) || string(raw.Files["text.txt"]) != `"héllo \u003c\u0026\u003e\n"` || len(raw.Collect) != 1 {
		t.Fatalf("wire form: %s", data)
	}
	got, err := airlock.DecodeJob(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Files["bin"]) != 256 || got.Files["bin"] != binary256() || got.Files["text.txt"] != job.Files["text.txt"] || got.Collect[0] != "out/*.bin" {
		t.Fatalf("decoded %q", got.Files)
	}
	var lenient airlock.Job
	if err := json.Unmarshal(data, &lenient); err != nil || lenient.Files["bin"] != binary256() {
		t.Fatalf("json.Unmarshal: %v, %d bytes", err, len(lenient.Files["bin"]))
	}
	// Either form for any file: a text file sent as base64 is the same job.
	same, err := airlock.DecodeJob([]byte(`{"kind":"command","argv":["cat"],"files":{"a":{"base64":"aGk="},"b":"hi"}}`))
	if err != nil || same.Files["a"] != "hi" || same.Files["b"] != "hi" {
		t.Fatalf("%v %q", err, same.Files)
	}
}

// TestJobFilesStrict: a file value that is neither a string nor exactly
// {"base64": valid base64} is one line naming "files".
func TestJobFilesStrict(t *testing.T) {
	for _, files := range []string{
		`{"a":{"base64":"aGk=","mode":1}}`,
		`{"a":{"hex":"00"}}`,
		`{"a":{}}`,
		`{"a":{"base64":"not base64!"}}`,
		`{"a":{"base64":5}}`,
		`{"a":5}`,
		`{"a":["x"]}`,
		`["a"]`,
	} {
		_, err := airlock.DecodeJob([]byte(`{"kind":"command","argv":["cat"],"files":` + files + `}`))
		var inv *airlock.InvalidJob
		if !errors.As(err, &inv) || inv.Field != "files" || strings.Contains(err.Error(), "\n") {
			t.Errorf("files %s: %v, want a one-line invalid files", files, err)
		}
	}
}

// TestResultOutputWire: binary output and collected files survive the
// wire; text stays a string.
func TestResultOutputWire(t *testing.T) {
	res := airlock.Result{Tier: "process", Stdout: binary256(), Stderr: "warn\n", Files: map[string]string{"o.bin": "\x00\xff", "o.txt": "x"}, FilesSkipped: []string{"l: a symbolic link, not followed"}}
	data, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"stdout":{"base64":"AAEC`) || !strings.Contains(string(data), `"stderr":"warn\n"`) || !strings.Contains(string(data), `"o.bin":{"base64":"AP8="}`) {
		t.Fatalf("wire form: %s", data)
	}
	var got airlock.Result
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if got.Stdout != res.Stdout || got.Stderr != res.Stderr || got.Files["o.bin"] != "\x00\xff" || got.Files["o.txt"] != "x" || len(got.FilesSkipped) != 1 {
		t.Fatalf("round trip: %+v", got)
	}
}

// TestValidateCollect: patterns stay inside the scratch, are printable
// path.Match patterns, bounded in number, and only for command and wasm
// jobs.
func TestValidateCollect(t *testing.T) {
	cmd := func(c ...string) airlock.Job {
		return airlock.Job{Kind: airlock.KindCommand, Argv: []string{"true"}, Collect: c}
	}
	if good := cmd("out.txt", "out/*.png", "a/b/c", "[ab]?.bin"); good.Validate() != nil {
		t.Fatalf("good patterns: %v", good.Validate())
	}
	many := make([]string, 65)
	for i := range many {
		many[i] = "f"
	}
	for name, job := range map[string]airlock.Job{
		"absolute":   cmd("/etc/passwd"),
		"dotdot":     cmd("../x"),
		"inner ..":   cmd("a/../../x"),
		"dot":        cmd("."),
		"unclean":    cmd("a//b"),
		"trailing /": cmd("a/"),
		"empty":      cmd(""),
		"control":    cmd("a\nb"),
		"NUL":        cmd("a\x00"),
		"bad utf-8":  cmd("a\xff"),
		"bad match":  cmd("a["),
		"too many":   cmd(many...),
		"expr":       {Kind: airlock.KindExpr, Code: "1", Collect: []string{"x"}},
		"starlark":   {Kind: airlock.KindStarlark, Code: "x = 1", Collect: []string{"x"}},
	} {
		var inv *airlock.InvalidJob
		if err := job.Validate(); !errors.As(err, &inv) || inv.Field != "collect" {
			t.Errorf("%s: %v, want an invalid collect", name, err)
		}
	}
}

// A file whose name another file needs as a directory makes the job
// invalid before any tier tries to place it.
func TestJobFilesFileAndDirectory(t *testing.T) {
	for _, files := range []map[string]string{{"a": "x", "a/b": "y"}, {"d/e": "x", "d/e/f/g": "y"}} {
		job := airlock.Job{Kind: airlock.KindCommand, Argv: []string{"true"}, Files: files}
		err := job.Validate()
		var inv *airlock.InvalidJob
		if !errors.As(err, &inv) || !strings.Contains(err.Error(), "is placed as a file and is also needed as a directory") {
			t.Errorf("files %v: %v", files, err)
		}
	}
	ok := airlock.Job{Kind: airlock.KindCommand, Argv: []string{"true"}, Files: map[string]string{"a/b": "x", "a/c": "y", "ab": "z"}}
	if err := ok.Validate(); err != nil {
		t.Errorf("siblings: %v", err)
	}
}

// A whole float in the input stays a float on the wire: the job written
// (an audit record, a replay file) and read back gives the program the
// same value, type and all.
func TestWireKeepsFloats(t *testing.T) {
	job := airlock.Job{Kind: airlock.KindExpr, Code: "x", Input: map[string]any{
		"f": 1.0, "i": int64(1), "l": []any{2.0, 2.5, int64(3)}, "m": map[string]any{"g": -0.0, "big": 1e21}}}
	b, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	back, err := airlock.DecodeJob(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back.Input, job.Input) {
		t.Errorf("input %s read back as %#v, want %#v", b, back.Input, job.Input)
	}
}
