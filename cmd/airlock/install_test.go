package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
	"github.com/airlock-sandbox/airlock/internal/tools"
)

// TestInstallAnywhere installs airlock with `make install PREFIX=...` and
// runs a gVisor job from / with nothing pointing at the checkout: the
// binary finds its tools relative to itself.
func TestInstallAnywhere(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and installs the binaries")
	}
	if _, err := tools.Find("runsc"); err != nil {
		testenv.Skipf(t, "gVisor: %v", err)
	}
	if _, err := exec.LookPath("make"); err != nil {
		testenv.Skipf(t, "make: %v", err)
	}
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	prefix := t.TempDir()
	install := exec.Command("make", "-s", "install", "PREFIX="+prefix)
	install.Dir = filepath.Dir(strings.TrimSpace(string(gomod)))
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("make install: %v\n%s", err, out)
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AIRLOCK_") && !strings.HasPrefix(kv, "XDG_DATA_HOME=") && !strings.HasPrefix(kv, "HOME=") {
			env = append(env, kv)
		}
	}
	env = append(env, "HOME="+t.TempDir())
	run := func(bin string, args ...string) (string, error) {
		cmd := exec.Command(bin, args...)
		cmd.Dir, cmd.Env = "/", env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run(filepath.Join(prefix, "bin", "airlock"), "run", "--tier", "gvisor", "--", "sh", "-c", "echo hi from gvisor")
	if err != nil || !strings.Contains(out, "hi from gvisor") {
		t.Fatalf("the installed airlock, run from /: %v\n%s", err, out)
	}
	// The installed airlock is the lean build: a heavy command runs in
	// airlock-full beside it.
	cmd := exec.Command(filepath.Join(prefix, "bin", "airlock"), "sanitize", "--allow", "docs.example.com")
	cmd.Dir, cmd.Env, cmd.Stdin = "/", env, strings.NewReader("[a](https://evil.example/x) [b](https://docs.example.com/y)\n")
	if b, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(b), "https://docs.example.com/y") || strings.Contains(string(b), "evil.example") {
		t.Fatalf("the installed airlock's sanitize, from /: %v\n%s", err, b)
	}
	// A copy of the binary with no tools beside it says what is missing
	// and how to install it.
	bare := filepath.Join(t.TempDir(), "bin")
	if err := os.MkdirAll(bare, 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(prefix, "bin", "airlock"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bare, "airlock"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	// An empty tools directory named explicitly, so that no installation
	// elsewhere on this machine (/usr/local/lib/airlock) serves the copy,
	// and no runsc on a PATH either.
	env = append(env, "AIRLOCK_TOOLS="+t.TempDir(), "PATH=/usr/bin:/bin")
	out, err = run(filepath.Join(bare, "airlock"), "run", "--tier", "gvisor", "--", "true")
	if err == nil || !strings.Contains(out, "make install PREFIX=") {
		t.Errorf("a bare binary asked for gVisor: %v\n%s", err, out)
	}
	// Without airlock-full beside it, a heavy command is a missing
	// backend, said in one line.
	out, err = run(filepath.Join(bare, "airlock"), "serve", "--config", "/nonexistent")
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != exitMissing || strings.Count(strings.TrimSpace(out), "\n") != 0 || !strings.Contains(out, "airlock-full") {
		t.Errorf("a bare lean binary asked to serve: %v\n%s", err, out)
	}
}
