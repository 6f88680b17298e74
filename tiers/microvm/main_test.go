package microvm

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// testAgent is the guest agent built from this checkout for the tests, so
// they never run a stale one from .tools.
var testAgent string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "airlock-microvm-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testAgent = filepath.Join(dir, "airlock-agent")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", testAgent, "./cmd/airlock-agent")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the guest agent:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// testConfig is the default config with the freshly built agent and a
// cache inside the test's temporary directory tree.
func testConfig() Config {
	return DefaultConfig().WithAgent(testAgent).WithCacheDir(filepath.Join(filepath.Dir(testAgent), "cache"))
}
