package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
	"github.com/airlock-sandbox/airlock/internal/tools"
)

// readmeLines returns every command line of README.md's sh blocks, with
// backslash continuations joined.
func readmeLines(t *testing.T, readme string) []string {
	t.Helper()
	data, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	in, cont := false, ""
	for _, l := range strings.Split(string(data), "\n") {
		switch {
		case !in && strings.TrimSpace(l) == "```sh":
			in = true
		case in && strings.TrimSpace(l) == "```":
			in = false
		case in:
			if strings.HasSuffix(l, "\\") {
				cont += strings.TrimSuffix(l, "\\")
				continue
			}
			if l = cont + l; strings.TrimSpace(l) != "" {
				lines = append(lines, l)
			}
			cont = ""
		}
	}
	return lines
}

// expectedOutput is the value a line's comment says it prints ("# 42").
var expectedOutput = regexp.MustCompile(`\s#\s+(-?\d+)(,|\s|$)`)

// TestREADME runs every command of README.md's sh blocks as written, from
// a copy of the checkout's tracked files, with the airlock just built on
// PATH and a fresh HOME. Each must exit 0 and print what its comment says;
// the servers are started, asked once and stopped. Nothing may be written
// inside the checkout.
func TestREADME(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every command of the README (minutes)")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	// As make build builds them: the lean airlock runs the heavy commands
	// the README shows (serve, sanitize, bench, corpus) in airlock-full.
	for _, b := range [][3]string{{"airlock", "./cmd/airlock", "lean"}, {"airlock-full", "./cmd/airlock", ""}, {"airlock-stage", "./tiers/process/cmd/airlock-stage", ""}} {
		cmd := exec.Command("go", "build", "-tags", b[2], "-o", filepath.Join(bin, b[0]), b[1])
		cmd.Dir, cmd.Env = root, append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", b[1], err, out)
		}
	}
	files, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
	if err != nil {
		testenv.Skipf(t, "the README's commands run from a git checkout: %v", err)
	}
	checkout := t.TempDir()
	for _, f := range strings.Split(strings.TrimRight(string(files), "\x00"), "\x00") {
		data, err := os.ReadFile(filepath.Join(root, f))
		if os.IsNotExist(err) {
			continue // deleted in the worktree
		}
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(checkout, f)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	before := listFiles(t, checkout)

	home := t.TempDir()
	env := []string{"HOME=" + home, "PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH")}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "HOME", "PATH", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME", "XDG_CONFIG_HOME":
		default:
			env = append(env, kv)
		}
	}
	for _, v := range []string{"GOCACHE", "GOMODCACHE"} {
		if out, err := exec.Command("go", "env", v).Output(); err == nil && os.Getenv(v) == "" {
			env = append(env, v+"="+strings.TrimSpace(string(out)))
		}
	}
	// The heavy tiers' tools, found as from the checkout itself.
	if d := tools.Dir(); d != "" && os.Getenv("AIRLOCK_TOOLS") == "" {
		if abs, err := filepath.Abs(d); err == nil {
			env = append(env, "AIRLOCK_TOOLS="+abs)
		}
	}
	// npm from the cache that set-up filled, going to the network only
	// for what it lacks.
	if realHome, err := os.UserHomeDir(); err == nil && os.Getenv("npm_config_cache") == "" {
		if st, err := os.Stat(filepath.Join(realHome, ".npm")); err == nil && st.IsDir() {
			env = append(env, "npm_config_cache="+filepath.Join(realHome, ".npm"))
		}
	}
	env = append(env, "npm_config_prefer_offline=true", "npm_config_audit=false", "npm_config_fund=false")

	_, gvisorErr := tools.Find("runsc")
	hadTools := imageNamed(t, bin, env, "tools")
	t.Cleanup(func() {
		if !hadTools {
			_ = exec.Command(filepath.Join(bin, "airlock"), "image", "rm", "tools").Run()
		}
	})

	for i, line := range readmeLines(t, filepath.Join(root, "README.md")) {
		name := strings.Fields(line)
		t.Run(strings.Join(name[:min(3, len(name))], "_")+"_"+string(rune('a'+i%26)), func(t *testing.T) {
			lineEnv := env
			want := ""
			switch {
			case strings.TrimSpace(line) == "make test":
				// This suite is what it runs: the target is resolved (make
				// -n), not run again inside itself.
				line, want = "make -n test >/dev/null && echo resolved", "resolved"
			case strings.HasPrefix(line, "airlock bench"):
				// As written but bounded: the full bench and corpus take
				// minutes and have tests of their own; what this checks is
				// that both run and write nowhere inside the checkout.
				line = strings.Replace(line, "airlock bench", "airlock bench --tiers expr --budget 100ms --iterations 200", 1)
				line = strings.Replace(line, "airlock corpus", "airlock corpus --tiers expr", 1)
			case strings.Contains(line, "--situation credentials"):
				// Through a local account made here, as set-up would.
				a := newLocalAccount(t)
				lineEnv = append(slices.Clone(env), "AIRLOCK_ACCOUNTS="+a.dir, "AIRLOCK_ACCOUNT="+a.name)
				want = "ok"
			}
			heavy := strings.Contains(line, "--image") || strings.Contains(line, "--tier process") ||
				strings.Contains(line, "report.py") || strings.HasPrefix(line, "npm ") || strings.Contains(line, "image build")
			if heavy && gvisorErr != nil {
				testenv.Skipf(t, "needs the heavy tiers: %v", gvisorErr)
			}
			if strings.HasPrefix(line, "npm ") {
				if _, err := exec.LookPath("npm"); err != nil {
					testenv.Skipf(t, "npm: %v", err)
				}
			}
			cmd := exec.Command("sh", "-c", line)
			cmd.Dir, cmd.Env = checkout, lineEnv
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			switch {
			case strings.HasPrefix(line, "airlock serve"):
				probeServe(t, cmd)
				return
			case strings.HasPrefix(line, "airlock mcp-wrap"):
				probeMCPWrap(t, cmd)
				return
			}
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", line, err, stdout.String(), stderr.String())
			}
			if m := expectedOutput.FindStringSubmatch(line); m != nil {
				want = m[1]
			}
			if want != "" {
				out := strings.Split(strings.TrimSpace(stdout.String()), "\n")
				if got := strings.TrimSpace(out[len(out)-1]); got != want {
					t.Errorf("%s: printed %q, want %s", line, stdout.String(), want)
				}
			}
		})
	}
	after := listFiles(t, checkout)
	for f := range after {
		if !before[f] {
			t.Errorf("a README command wrote %s inside the checkout", f)
		}
	}
}

// listFiles is the set of files under dir.
func listFiles(t *testing.T, dir string) map[string]bool {
	t.Helper()
	set := map[string]bool{}
	err := filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			set[rel] = true
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// imageNamed reports whether the image store already holds name.
func imageNamed(t *testing.T, bin string, env []string, name string) bool {
	cmd := exec.Command(filepath.Join(bin, "airlock"), "images")
	cmd.Env = env
	out, _ := cmd.Output()
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) > 0 && strings.Contains(","+f[0]+",", ","+name+",") {
			return true
		}
	}
	return false
}

// stopGroup ends a started line's process group and waits for it.
func stopGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	}
}

// probeServe starts airlock serve and waits for its health endpoint and
// its tier list to answer.
func probeServe(t *testing.T, cmd *exec.Cmd) {
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer stopGroup(cmd)
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get("http://127.0.0.1:8420/healthz")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"ok":true`) {
				t.Fatalf("GET /healthz: %s %s", resp.Status, body)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("airlock serve did not answer within a minute: %v\n%s", err, log.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// probeMCPWrap starts airlock mcp-wrap, sends an MCP initialize and then
// tools/list over its stdin, and checks the answers.
func probeMCPWrap(t *testing.T, cmd *exec.Cmd) {
	var stderr strings.Builder
	cmd.Stderr = &stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer stopGroup(cmd)
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(outPipe)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	answer := func(id string) string {
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("mcp-wrap ended before answering request %s\n%s", id, stderr.String())
				}
				if strings.Contains(l, `"id":`+id) {
					return l
				}
			case <-ctx.Done():
				t.Fatalf("mcp-wrap did not answer request %s in time\n%s", id, stderr.String())
			}
		}
	}
	io.WriteString(in, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"readme-test","version":"1"}}}`+"\n")
	if l := answer("1"); !strings.Contains(l, `"result"`) {
		t.Fatalf("initialize: %s", l)
	}
	io.WriteString(in, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n")
	// The wrapper offers the server's tools once it has listed them; ask
	// until the list is there.
	var l string
	var names []string
	for id := 2; id < 20 && len(names) == 0; id++ {
		if id > 2 {
			time.Sleep(time.Second)
		}
		io.WriteString(in, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/list"}`, id)+"\n")
		l = answer(fmt.Sprint(id))
		for _, m := range regexp.MustCompile(`"name":"([a-z_]+)"`).FindAllStringSubmatch(l, -1) {
			names = append(names, m[1])
		}
	}
	sort.Strings(names)
	if !strings.Contains(l, `"read_text_file"`) || strings.Contains(l, `"write_file"`) {
		t.Errorf("tools/list under examples/tools.yaml: %v\n%s", names, l)
	}
	in.Close()
}
