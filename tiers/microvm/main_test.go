package microvm

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testing/tiertest"
	"github.com/airlock-sandbox/airlock/role"
)

// testAgent is the guest agent built from this checkout for the tests, so
// they never run a stale one from .tools.
var (
	testDir   string
	testAgent string
)

func TestMain(m *testing.M) {
	role.Run(Roles()) // the egress forwarder QEMU starts is this binary
	var err error
	testDir, err = os.MkdirTemp("", "airlock-microvm-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// Others may pass through, as through the default state directory's
	// parent, so that the tests' VMs run as users of their own.
	if err := os.Chmod(testDir, 0o711); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testAgent = filepath.Join(testDir, "airlock-agent")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", testAgent, "./cmd/airlock-agent")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the guest agent:", err)
		os.RemoveAll(testDir)
		os.Exit(1)
	}
	code := m.Run()
	shared.close()
	os.RemoveAll(testDir)
	os.Exit(code)
}

// testConfig is the default config with the freshly built agent, and a
// cache and state directory inside the test's temporary directory.
func testConfig() Config {
	return DefaultConfig().WithAgent(testAgent).
		WithCacheDir(filepath.Join(testDir, "cache")).
		WithStateDir(filepath.Join(testDir, "state"))
}

// shared tiers are built once per test binary: a snapshot made once serves
// every test that restores from it, which keeps the number of boots small.
var shared sharedTiers

type sharedTiers struct {
	mu    sync.Mutex
	tiers map[Warm]*Tier
}

func (s *sharedTiers) get(t testing.TB, w Warm) *Tier {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if tier := s.tiers[w]; tier != nil {
		return tier
	}
	tier, err := New(testConfig().WithWarm(w))
	if err != nil {
		t.Fatal(err)
	}
	if err := tier.Available(); err != nil {
		tiertest.Unavailable(t, Name, err)
	}
	if s.tiers == nil {
		s.tiers = map[Warm]*Tier{}
	}
	s.tiers[w] = tier
	return tier
}

func (s *sharedTiers) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.tiers {
		t.Close()
	}
}
