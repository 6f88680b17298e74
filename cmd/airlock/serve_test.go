package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
	"github.com/airlock-sandbox/airlock/internal/tools"
	"github.com/airlock-sandbox/airlock/server"
)

// The fault tests run the real CLI in a child process: this test binary
// re-executed with AIRLOCK_CLI_CHILD=1 runs Run(args) as main would.
const testKey = "ak_cli-test-key-0123456789abcdef0123456789"

func writeConfig(t *testing.T, extra string) (dir, path string) {
	t.Helper()
	dir = t.TempDir()
	path = filepath.Join(dir, "serve.yaml")
	cfg := fmt.Sprintf("audit: audit.jsonl\nshutdown_grace: 300ms\n%stenants:\n  - name: t\n    key_sha256: %s\n", extra, server.HashKey(testKey))
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, path
}

type child struct {
	cmd  *exec.Cmd
	addr string
	done chan error
	log  *bytes.Buffer
}

// startServe runs `airlock serve` in a child process in its own process
// group and waits for its address.
func startServe(t *testing.T, config string) *child {
	t.Helper()
	return startServeOn(t, config, "127.0.0.1:0")
}

// startServeOn is startServe listening on addr, with env added to the
// child's environment.
func startServeOn(t *testing.T, config, addr string, env ...string) *child {
	t.Helper()
	return startServeArgs(t, env, "--config", config, "--listen", addr)
}

// startServeArgs is startServe with the serve command's arguments.
func startServeArgs(t *testing.T, env []string, args ...string) *child {
	t.Helper()
	return startChild(t, env, "airlock: serving on http://", append([]string{"serve"}, args...)...)
}

// startChild starts `airlock args...` and waits for the stderr line that
// starts with ready, whose first word after it is the child's address.
func startChild(t *testing.T, env []string, ready string, args ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), "AIRLOCK_CLI_CHILD=1"), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, done: make(chan error, 1), log: &bytes.Buffer{}}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-c.done
	})
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		line := sc.Text()
		c.log.WriteString(line + "\n")
		if rest, ok := strings.CutPrefix(line, ready); ok {
			c.addr = strings.Fields(rest)[0]
			break
		}
	}
	go func() {
		_, _ = io.Copy(c.log, stderr)
		c.done <- cmd.Wait()
	}()
	if c.addr == "" {
		t.Fatalf("%s did not start: %s", args[0], c.log)
	}
	return c
}

func post(t *testing.T, addr, body string) (int, string, error) {
	req, _ := http.NewRequest("POST", "http://"+addr+"/v1/run", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data), nil
}

// groupAlive reports processes left in the process group pgid.
func groupAlive(pgid int) []string {
	var left []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if g, err := syscall.Getpgid(pid); err == nil && g == pgid {
			stat, _ := os.ReadFile("/proc/" + e.Name() + "/stat")
			if !strings.Contains(string(stat), ") Z ") {
				left = append(left, strings.TrimSpace(string(stat)))
			}
		}
	}
	return left
}

const spin = `{"kind":"starlark","code":"x = 0\nfor i in range(1 << 40):\n    x += 1","limits":{"wall_ms":20000,"steps":100000000000}}`

func TestServeKill9AndRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts server processes; skipped with -short")
	}
	dir, cfg := writeConfig(t, "limits:\n  max: {steps: 100000000000}\n")
	c := startServe(t, cfg)
	if code, body, err := post(t, c.addr, `{"kind":"expr","code":"1 + 1"}`); err != nil || code != 200 {
		t.Fatalf("first run: %d %s %v", code, body, err)
	}
	errc := make(chan error, 1)
	go func() { _, _, err := post(t, c.addr, spin); errc <- err }()
	// Where gVisor is available, a sandbox is running too when the server dies.
	withSandbox := tierAvailable(t, c.addr, "gvisor")
	marker := fmt.Sprintf("airlock-gv-%d-", c.cmd.Process.Pid)
	if withSandbox {
		go post(t, c.addr, `{"kind":"command","argv":["sleep","30"],"limits":{"wall_ms":60000}}`)
		for i := 0; i < 200 && len(leftovers(marker)) == 0; i++ {
			time.Sleep(50 * time.Millisecond)
		}
		if len(leftovers(marker)) == 0 {
			t.Fatal("the gVisor sandbox did not start within 10s")
		}
	}
	time.Sleep(300 * time.Millisecond) // let the runs start
	pgid := c.cmd.Process.Pid
	if err := syscall.Kill(pgid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-c.done
	c.done <- nil // for the cleanup
	if err := <-errc; err == nil {
		t.Error("the run in flight got an answer from a killed server")
	}
	if left := groupAlive(pgid); len(left) > 0 {
		t.Errorf("processes left after kill -9: %v", left)
	}
	// The next start constructs every tier (the OS tiers sweep their
	// orphans there) and serves again with the same audit trail.
	if withSandbox {
		left := leftovers(marker)
		if len(left) == 0 {
			t.Error("no sandbox outlived kill -9: the sweep below is not tested")
		}
		t.Logf("left by kill -9: %d sandbox processes and cgroups", len(left))
	}
	c2 := startServe(t, cfg)
	if withSandbox {
		// The new server's gVisor tier swept the dead server's sandboxes,
		// their processes and cgroups when it was built.
		for i := 0; i < 100 && len(leftovers(marker)) > 0; i++ {
			time.Sleep(50 * time.Millisecond)
		}
		if left := leftovers(marker); len(left) > 0 {
			t.Errorf("orphans of the killed server after restart: %v", left)
		}
	} else {
		t.Log("gVisor unavailable: only in-process tiers ran, nothing outside the server could be orphaned")
	}
	if code, body, err := post(t, c2.addr, `{"kind":"starlark","code":"result = 40 + 2"}`); err != nil || code != 200 || !strings.Contains(body, `"value":42`) {
		t.Fatalf("run after restart: %d %s %v", code, body, err)
	}
	lines := readLines(t, filepath.Join(dir, "audit.jsonl"))
	if len(lines) != 2 && !withSandbox {
		t.Errorf("%d audit lines, want 2 (the killed run never finished): %v", len(lines), lines)
	}
	for _, l := range lines {
		if !json.Valid([]byte(l)) {
			t.Errorf("a torn audit line: %q", l)
		}
	}
	// Graceful stop: SIGTERM while a job runs; it is cancelled after the grace.
	go func() { _, _, err := post(t, c2.addr, spin); errc <- err }()
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	if err := c2.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-c2.done; err != nil {
		t.Errorf("serve exited with %v after SIGTERM: %s", err, c2.log)
	}
	c2.done <- nil
	t.Logf("SIGTERM to exit with a job in flight: %v", time.Since(start))
	if err := <-errc; err != nil {
		t.Errorf("the run in flight got no answer on a graceful stop: %v", err)
	}
	if left := groupAlive(c2.cmd.Process.Pid); len(left) > 0 {
		t.Errorf("processes left after SIGTERM: %v", left)
	}
	if got := readLines(t, filepath.Join(dir, "audit.jsonl")); len(got) != 3 || !strings.Contains(got[2], `"stopped":{"reason":"killed"`) && !strings.Contains(got[2], "timeout") {
		t.Errorf("the cancelled run is not audited as stopped: %v", got)
	}
}

// tierAvailable asks a running server whether a tier is available.
func tierAvailable(t *testing.T, addr, name string) bool {
	req, _ := http.NewRequest("GET", "http://"+addr+"/v1/tiers", nil)
	req.Header.Set("Authorization", "Bearer "+testKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var tiers []struct {
		Name      string
		Available bool
	}
	json.NewDecoder(resp.Body).Decode(&tiers)
	for _, ti := range tiers {
		if ti.Name == name {
			return ti.Available
		}
	}
	return false
}

// leftovers lists processes whose command line, and cgroups whose name,
// carry marker (a gVisor sandbox id prefix with its owner's PID).
func leftovers(marker string) []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cmdline, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if bytes.Contains(cmdline, []byte(marker)) {
			out = append(out, e.Name()+": "+strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
	groups, _ := filepath.Glob("/sys/fs/cgroup/*/" + marker + "*")
	return append(out, groups...)
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(data)), "\n")
}

func TestServeUsage(t *testing.T) {
	out, _, code := run(t, "", "serve", "--new-key")
	if code != exitOK || !strings.Contains(out, "key_sha256: ") || !strings.Contains(out, "key:        ak_") {
		t.Errorf("--new-key: %d %q", code, out)
	}
	_, errOut, code := run(t, "", "serve")
	if code != exitUsage || !strings.Contains(errOut, "--config") {
		t.Errorf("serve without a config: %d %q", code, errOut)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("tenants:\n  - name: x\n    key_sha256: nothex\n"), 0o600)
	_, errOut, code = run(t, "", "serve", "--config", bad)
	if code != exitUsage || !strings.Contains(errOut, "tenants[0].key_sha256") {
		t.Errorf("a bad key hash: %d %q", code, errOut)
	}
	os.WriteFile(bad, []byte("tenants: []\nlisten_port: 1\n"), 0o600)
	_, errOut, code = run(t, "", "serve", "--config", bad)
	if code != exitUsage || !strings.Contains(errOut, "listen_port") {
		t.Errorf("an unknown field: %d %q", code, errOut)
	}
}

// mcpStdio starts `airlock ARGS` (an MCP server over stdio) in-process
// and connects a client; stop closes both and returns the exit status.
func mcpStdio(t *testing.T, args ...string) (cs *mcp.ClientSession, stop func() int) {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		var errb bytes.Buffer
		done <- Run(ctx, args, inR, outW, &errb)
		outW.Close()
	}()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, &mcp.IOTransport{Reader: outR, Writer: inW}, nil)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	return cs, func() int {
		cs.Close()
		inW.Close()
		cancel()
		return <-done
	}
}

func TestMCPStdio(t *testing.T) {
	cs, stop := mcpStdio(t, "mcp")
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "run_starlark", Arguments: map[string]any{"code": "result = 6 * 7"}})
	if err != nil {
		t.Fatal(err)
	}
	if text := res.Content[0].(*mcp.TextContent).Text; !strings.Contains(text, "tier: starlark") || !strings.Contains(text, "value: 42") {
		t.Errorf("run_starlark over stdio: %s", text)
	}
	if code := stop(); code != exitOK {
		t.Errorf("mcp exited %d", code)
	}
}

// serveJobs builds a server from a test configuration with extra lines,
// runs each job through its handler (each must answer 200) and returns the
// configuration's directory and the server, still open.
func serveJobs(t *testing.T, extra string, jobs ...string) (string, *server.Server) {
	t.Helper()
	dir, cfg := writeConfig(t, extra)
	c, err := server.LoadConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := newServer(c, &tierFlags{}, server.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, job := range jobs {
		req, _ := http.NewRequest("POST", "/v1/run", strings.NewReader(job))
		req.Header.Set("Authorization", "Bearer "+testKey)
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, req)
		if rec.Code != 200 {
			srv.Close()
			t.Fatalf("%s: %d %s", job, rec.Code, rec.Body.String())
		}
	}
	return dir, srv
}

func TestReplayCommand(t *testing.T) {
	dir, srv := serveJobs(t, "", `{"kind":"starlark","code":"result = [random.random(), time.now().unix]"}`, `{"kind":"expr","code":"now().Year()"}`)
	srv.Close()
	audit := filepath.Join(dir, "audit.jsonl")
	for _, spec := range []string{audit + ":1", audit + ":2"} {
		if _, errOut, code := run(t, "", "replay", spec); code != exitOK || !strings.Contains(errOut, "replay matches") {
			t.Errorf("replay %s: %d %s", spec, code, errOut)
		}
	}
	line := readLines(t, audit)[0]
	var m map[string]any
	json.Unmarshal([]byte(line), &m)
	m["seed"] = m["seed"].(float64) + 1
	tampered, _ := json.Marshal(m)
	if _, errOut, code := run(t, string(tampered), "replay", "-"); code != exitFailed || !strings.Contains(errOut, "MISMATCH") {
		t.Errorf("replay with another seed: %d %s", code, errOut)
	}
	if _, errOut, code := run(t, "", "replay", audit); code != exitUsage || !strings.Contains(errOut, "holds 2 records") {
		t.Errorf("replay of a whole trail: %d %s", code, errOut)
	}
}

// The sample configuration the README links to starts, and its demo key
// runs an expression.
func TestSampleConfig(t *testing.T) {
	cfg, err := server.LoadConfig(filepath.Join("..", "..", "examples", "serve.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := newServer(cfg, &tierFlags{}, server.Options{Audit: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	req := httptest.NewRequest("POST", "/v1/run", strings.NewReader(`{"kind":"expr","code":"1 + 2"}`))
	req.Header.Set("Authorization", "Bearer ak_demo-tenant-key-replace-me-0000000000000")
	w := httptest.NewRecorder()
	srv.Handler().ServeHTTP(w, req)
	if w.Code != 200 || !strings.Contains(w.Body.String(), `"value":3`) {
		t.Errorf("sample config: %d %s", w.Code, w.Body)
	}
}

// TestServerDocJobs: every job docs/server.md posts with curl to
// /v1/run runs as written under the sample configuration and its demo
// key: answered 200, no error, and a command's program exits 0. A
// command needs a level-4 tier (the demo tenant's situation is public).
func TestServerDocJobs(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "server.md"))
	if err != nil {
		t.Fatal(err)
	}
	// A command goes on while its line ends in a backslash or leaves a
	// single quote open.
	var jobs []string
	body := regexp.MustCompile(`(?s)-d '([^']*)'`)
	cmd, inSh := "", false
	for _, line := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(line, "```") {
			inSh, cmd = line == "```sh", ""
			continue
		}
		if !inSh {
			continue
		}
		if strings.Count(cmd, "'")%2 == 0 {
			line, _, _ = strings.Cut(line, " # ") // a comment, outside quotes
		}
		cmd += line + "\n"
		if strings.HasSuffix(line, "\\") || strings.Count(cmd, "'")%2 == 1 {
			continue
		}
		if strings.HasPrefix(cmd, "curl ") && strings.Contains(cmd, "/v1/run") {
			if m := body.FindStringSubmatch(cmd); m != nil {
				jobs = append(jobs, m[1])
			}
		}
		cmd = ""
	}
	if len(jobs) < 5 {
		t.Fatalf("found %d curl jobs in docs/server.md: %q", len(jobs), jobs)
	}
	cfg, err := server.LoadConfig(filepath.Join("..", "..", "examples", "serve.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := newServer(cfg, &tierFlags{}, server.Options{Audit: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	_, gvisorErr := tools.Find("runsc")
	for _, job := range jobs {
		t.Run("", func(t *testing.T) {
			if strings.Contains(job, `"kind":"command"`) && gvisorErr != nil {
				testenv.Skipf(t, "a command of the demo tenant runs on gVisor: %v", gvisorErr)
			}
			req := httptest.NewRequest("POST", "/v1/run", strings.NewReader(job))
			req.Header.Set("Authorization", "Bearer ak_demo-tenant-key-replace-me-0000000000000")
			w := httptest.NewRecorder()
			srv.Handler().ServeHTTP(w, req)
			var res struct {
				ExitCode int             `json:"exit_code"`
				Error    json.RawMessage `json:"error"`
				Stopped  json.RawMessage `json:"stopped"`
				Stderr   any             `json:"stderr"`
			}
			if w.Code != 200 || json.Unmarshal(w.Body.Bytes(), &res) != nil || res.Error != nil || res.Stopped != nil || res.ExitCode != 0 {
				t.Errorf("%s: %d %s", job, w.Code, w.Body)
			}
		})
	}
}

// The tiers' settings come from the configuration's tier_settings, and a
// flag that is set overrides the file; settings out of range are refused
// before anything is built or served.
func TestTierSettings(t *testing.T) {
	_, path := writeConfig(t, "tier_settings:\n  process_pool: 3\n  gvisor_pool: 2\n  microvm_warm: snapshot\n  image_pools: {gvisor: {node: 1}, process: {python: 2}, microvm: {node: 3}}\n")
	cfg, err := server.LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	var tf tierFlags
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	tf.register(fs)
	const pinned = "registry.example/team/tool@sha256:0123"
	if err := fs.Parse([]string{"--process-pool", "5", "--microvm-pool", "1",
		"--image-pool", "process:node=4", "--image-pool", "gvisor:node=0", "--image-pool", "microvm:" + pinned + "=1"}); err != nil {
		t.Fatal(err)
	}
	o, err := tf.options(configTiers(&cfg))
	if err != nil {
		t.Fatal(err)
	}
	if o.ProcessPool != 5 || o.GVisorPool != 2 || o.MicroVMWarm != "snapshot" || o.MicroVMPool != 1 || o.Limits != cfg.TierLimits() {
		t.Errorf("settings %+v", o)
	}
	// --image-pool sets one tier's image over the file, leaving its others.
	if !maps.Equal(o.ProcessImagePools, map[string]int{"python": 2, "node": 4}) || !maps.Equal(o.GVisorImagePools, map[string]int{"node": 0}) ||
		!maps.Equal(o.MicroVMImagePools, map[string]int{"node": 3, pinned: 1}) {
		t.Errorf("image pools: process %v, gvisor %v, microvm %v", o.ProcessImagePools, o.GVisorImagePools, o.MicroVMImagePools)
	}
	if !maps.Equal(cfg.TierSettings.ImagePools["process"], map[string]int{"python": 2}) {
		t.Errorf("the configuration's image_pools were written: %v", cfg.TierSettings.ImagePools)
	}
	for _, bad := range []struct{ arg, want string }{
		{"wasm:python=1", `tier "wasm" keeps no pools per image`},
		{"process:python", "want TIER:IMAGE=N"},
		{"python=2", "want TIER:IMAGE=N"},
		{"process:python=-1", `process pool of image "python": -1`},
	} {
		if _, errOut, code := run(t, "", "explain", "--kind", "expr", "--image-pool", bad.arg); code != exitUsage || !strings.Contains(errOut, bad.want) {
			t.Errorf("explain --image-pool %s: %d %q; want %q", bad.arg, code, errOut, bad.want)
		}
	}
	_, bad := writeConfig(t, "tier_settings:\n  process_pool: 65\n")
	if _, errOut, code := run(t, "", "serve", "--config", bad, "--listen", "127.0.0.1:0"); code != exitUsage || !strings.Contains(errOut, "process pool 65") {
		t.Errorf("serve with process_pool 65: %d %s", code, errOut)
	}
	if _, errOut, code := run(t, "", "explain", "--kind", "expr", "--microvm-warm", "tepid"); code != exitUsage || !strings.Contains(errOut, "tepid") {
		t.Errorf("explain --microvm-warm tepid: %d %s", code, errOut)
	}
	if out, errOut, code := run(t, "", "explain", "--kind", "expr", "--process-pool", "1"); code != exitOK || !strings.Contains(out, "expr") {
		t.Errorf("explain --process-pool 1: %d %s %s", code, out, errOut)
	}
}

// TestMCPAllowSpawn: `airlock mcp --allow-spawn` gives the local tenant's
// command jobs the spawn grant, and run_command's description says which
// way it is; with --config the tenant's mcp_spawn decides instead.
func TestMCPAllowSpawn(t *testing.T) {
	for _, spawn := range []bool{false, true} {
		args := []string{"mcp"}
		if spawn {
			args = append(args, "--allow-spawn")
		}
		cs, stop := mcpStdio(t, args...)
		tools, err := cs.ListTools(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, tool := range tools.Tools {
			if tool.Name == "run_command" && strings.Contains(tool.Description, "may not start other programs") == spawn {
				t.Errorf("--allow-spawn %v: run_command's description: %s", spawn, tool.Description)
			}
		}
		if code := stop(); code != exitOK {
			t.Errorf("mcp %v exited %d", args, code)
		}
	}
	_, cfg := writeConfig(t, "")
	if _, errOut, code := run(t, "", "mcp", "--config", cfg, "--allow-spawn"); code != exitUsage || !strings.Contains(errOut, "mcp_spawn") {
		t.Errorf("mcp --config --allow-spawn: %d %s", code, errOut)
	}
}

// A record is data anyone may have written: replay holds its read grants
// to the paths --allow-read names, as run holds a job file's, and its
// tier to what the routing policy gives its job's situation.
func TestReplayRefusesForgedGrants(t *testing.T) {
	module, err := os.ReadFile(filepath.Join("..", "..", "examples", "echo.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	record := func(job map[string]any, tier string) string {
		b, err := json.Marshal(map[string]any{"time": "2026-12-07T00:00:00Z", "tenant": "demo", "request": "run",
			"tier": tier, "outcome": "ok", "output": "0", "job": job})
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	grant := map[string]any{"kind": "wasm", "module": module, "situation": "expression",
		"grants": map[string]any{"fs": map[string]any{"read": []string{dir}}}}
	_, errOut, code := run(t, record(grant, "wasm"), "replay", "-")
	if code != exitDenied || !strings.Contains(errOut, "--allow-read") {
		t.Errorf("a record's own read grant: %d %s", code, errOut)
	}
	// Allowed, it runs (its made-up output digest does not match).
	out, errOut, code := run(t, record(grant, "wasm"), "replay", "--json", "--allow-read", dir, "-")
	if code != exitFailed || !strings.Contains(errOut, "MISMATCH") || !strings.Contains(out, `"tier": "wasm"`) {
		t.Errorf("the read grant allowed: %d %s %s", code, out, errOut)
	}
	// A public command on the process tier: below the public rule's level.
	cmd := map[string]any{"kind": "command", "argv": []string{"true"}, "situation": "public"}
	_, errOut, code = run(t, record(cmd, "process"), "replay", "-")
	if code != exitNotAdmitted || !strings.Contains(errOut, "rule public asks for level 4 or above, process is level 3") {
		t.Errorf("a public job on level 3: %d %s", code, errOut)
	}
}
