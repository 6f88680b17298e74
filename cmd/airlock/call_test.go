package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// buildTool builds the example WASM tool into a temporary directory.
func buildTool(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "greet.wasm")
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-buildmode=c-shared", "-o", out, "../../wasm/examples/greet")
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the example tool: %v\n%s", err, msg)
	}
	return out
}

func TestCall(t *testing.T) {
	t.Setenv("AIRLOCK_WASM_CACHE", t.TempDir())
	tool := buildTool(t)
	name := filepath.Join(t.TempDir(), "name.txt")
	if err := os.WriteFile(name, []byte("ada\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(stdin string, args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := Run(context.Background(), args, strings.NewReader(stdin), &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	code, out, errOut := run("", "call", tool, "greet", "--input", "@"+name, "--grant", "log,kv")
	if code != exitOK || out != "hello, ada (call 1)" || !strings.Contains(errOut, "greeting ada") {
		t.Fatalf("greet: code %d stdout %q stderr %q", code, out, errOut)
	}
	code, out, _ = run("quiet", "call", tool, "upper", "--input", "-")
	if code != exitOK || out != "QUIET" {
		t.Fatalf("upper from stdin: code %d stdout %q", code, out)
	}
	code, _, errOut = run("", "call", tool, "greet", "--input", "ada")
	if code != exitDenied || !strings.Contains(errOut, "log was not granted") {
		t.Fatalf("greet without grants: code %d stderr %q", code, errOut)
	}
	code, out, _ = run("", "call", "--json", tool, "greet", "--input", "ada")
	if code != exitDenied || !strings.Contains(out, `"reason": "denied"`) {
		t.Fatalf("--json denial: code %d stdout %q", code, out)
	}
	// Output that is not UTF-8 keeps its bytes in --json, as in results.
	code, out, _ = run("", "call", "--json", tool, "greet", "--input", "\xff\xfe", "--grant", "log,kv")
	if want := base64.StdEncoding.EncodeToString([]byte("hello, \xff\xfe (call 1)")); code != exitOK || !strings.Contains(out, `"base64": "`+want+`"`) {
		t.Fatalf("--json binary output: code %d stdout %q, want base64 %s", code, out, want)
	}
	for _, args := range [][]string{
		{"call", tool},                               // no function
		{"call", "/no/such.wasm", "f"},               // missing tool
		{"call", tool, "greet", "--input", "@/nope"}, // missing input file
		{"call", tool, "greet", "--grant", "exec"},   // unknown grant
	} {
		if code, _, _ := run("", args...); code != exitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, exitUsage)
		}
	}
}
