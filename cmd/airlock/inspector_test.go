package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
	"github.com/airlock-sandbox/airlock/internal/tools"
)

// The official MCP Inspector (TypeScript SDK) is a second, independent
// client: its CLI mode lists the tools with its schema checks on (--strict
// exits non-zero on a schema the MCP specification does not allow) and
// calls each one, over stdio and over streamable HTTP.

// inspector runs the Inspector's CLI against target with args and returns
// the JSON answer it printed first.
func inspector(t *testing.T, target []string, args ...string) (map[string]any, string) {
	t.Helper()
	bin, err := tools.Find("mcp-inspector")
	if err != nil {
		testenv.Skipf(t, "MCP Inspector: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	argv := append(append([]string{"--cli"}, target...), args...)
	if slices.Contains(target, "--") {
		// A target with a "--" of its own (mcp-wrap's) goes last, after
		// the Inspector's: it splits at its first "--" only.
		argv = append(append(append([]string{"--cli"}, args...), "--"), target...)
	}
	cmd := exec.CommandContext(ctx, bin, argv...)
	// Its catalogue file goes to $HOME; keep it in the test's directory.
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	var out map[string]any
	if derr := json.NewDecoder(&stdout).Decode(&out); derr != nil {
		t.Fatalf("inspector %v: %v (%v)\nstdout: %s\nstderr: %s", args, derr, err, stdout.String(), stderr.String())
	}
	if err != nil && !isToolError(err, out) {
		t.Fatalf("inspector %v: %v\nstderr: %s", args, err, stderr.String())
	}
	return out, stderr.String()
}

// isToolError reports the Inspector's exit for a call whose result had
// isError set, which some of the calls below expect.
func isToolError(err error, out map[string]any) bool {
	var ee *exec.ExitError
	return errors.As(err, &ee) && out["isError"] == true
}

func structured(t *testing.T, out map[string]any) map[string]any {
	t.Helper()
	sc, _ := out["structuredContent"].(map[string]any)
	if sc == nil {
		t.Fatalf("no structured content in %v", out)
	}
	return sc
}

var allTools = []string{"close_session", "evaluate_expression", "explain", "open_session", "run_command", "run_in_session", "run_starlark", "run_wasm"}

func inspectTools(t *testing.T, target []string, overHTTP bool) {
	list, stderr := inspector(t, target, "--method", "tools/list", "--strict")
	if strings.Contains(stderr, "Warning") || strings.Contains(stderr, "Error") {
		t.Errorf("schema findings:\n%s", stderr)
	}
	var names []string
	for _, tool := range list["tools"].([]any) {
		names = append(names, tool.(map[string]any)["name"].(string))
	}
	slices.Sort(names)
	if !slices.Equal(names, allTools) {
		t.Errorf("tools/list: %v, want %v", names, allTools)
	}
	call := func(tool string, args ...string) map[string]any {
		a := []string{"--method", "tools/call", "--tool-name", tool}
		if len(args) > 0 {
			a = append(append(a, "--tool-arg"), args...)
		}
		out, _ := inspector(t, target, a...)
		return out
	}
	if sc := structured(t, call("evaluate_expression", "expression=6*7")); sc["value"] != 42.0 || sc["tier"] != "expr" {
		t.Errorf("evaluate_expression: %v", sc)
	}
	if sc := structured(t, call("run_starlark", "code=result = [1, 2]")); sc["tier"] != "starlark" || len(sc["value"].([]any)) != 2 {
		t.Errorf("run_starlark: %v", sc)
	}
	// The smallest valid module: no _start, so the call is an error the
	// result explains, not a transport failure.
	wasm := base64.StdEncoding.EncodeToString([]byte("\x00asm\x01\x00\x00\x00"))
	if out := call("run_wasm", "module_base64="+wasm); out["isError"] != true || structured(t, out)["error"] == nil {
		t.Errorf("run_wasm of a module without _start: %v", out)
	}
	if sc := structured(t, call("explain", "kind=command", `argv=["sh"]`)); sc["situation"] != "public" || sc["tiers"] == nil {
		t.Errorf("explain: %v", sc)
	}
	out := call("run_command", `argv=["sh","-c","echo hi; exit 3"]`)
	if sc := structured(t, out); sc["stdout"] != "hi\n" || sc["exit_code"] != 3.0 || out["isError"] != true {
		t.Errorf("run_command: %v", out)
	}
	// A session's calls are separate Inspector processes, so separate MCP
	// connections: over HTTP the session outlives each of them, and the
	// whole session is used; over stdio each call has its own server.
	sc := structured(t, call("open_session"))
	id, _ := sc["session"].(string)
	if id == "" {
		t.Errorf("open_session: %v", sc)
	}
	if overHTTP && id != "" {
		call("run_in_session", "session="+id, `argv=["sh","-c","echo kept > f"]`)
		if sc := structured(t, call("run_in_session", "session="+id, `argv=["cat","f"]`)); sc["stdout"] != "kept\n" || sc["exit_code"] != 0.0 {
			t.Errorf("run_in_session: %v", sc)
		}
		if sc := structured(t, call("close_session", "session="+id)); sc["session"] != id {
			t.Errorf("close_session: %v", sc)
		}
	}
	if sc := structured(t, call("run_in_session", "session=s-none", `argv=["true"]`)); !strings.Contains(sc["error"].(map[string]any)["message"].(string), "unknown session") {
		t.Errorf("run_in_session of an unknown session: %v", sc)
	}
	if sc := structured(t, call("close_session", "session=s-none")); sc["error"] == nil {
		t.Errorf("close_session of an unknown session: %v", sc)
	}
}

func TestInspectorStdio(t *testing.T) {
	inspectTools(t, []string{"-e", "AIRLOCK_CLI_CHILD=1", os.Args[0], "mcp"}, false)
}

func TestInspectorHTTP(t *testing.T) {
	_, config := writeConfig(t, "")
	c := startServe(t, config)
	inspectTools(t, []string{"http://" + c.addr + "/mcp", "--transport", "http", "--header", "Authorization: Bearer " + testKey}, true)
}
