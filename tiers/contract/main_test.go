// Package contract runs one table of cases, each a command job and the
// outcome the contract promises for it, on every OS tier — the level-3
// container, gVisor and the microVM — and expects the same outcome from
// each: a job written once means the same wherever the router sends it.
// The cases are data (testdata/cases.jsonl); the contract they check is
// the table in SECURITY.md.
package contract

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testing/roletest"
	"github.com/airlock-sandbox/airlock/role"
	"github.com/airlock-sandbox/airlock/tiers/gvisor"
	"github.com/airlock-sandbox/airlock/tiers/microvm"
	"github.com/airlock-sandbox/airlock/tiers/process"
)

// testDir holds what the test binary makes for itself: the microVM's guest
// agent, built from this checkout, and the tiers' state.
var testDir string

// TestMain runs this binary in the tiers' roles (the process tier's
// stages, the gVisor agent, the microVM's egress forwarder) when a tier
// starts it in one, and the tests otherwise.
func TestMain(m *testing.M) {
	roles := [][]role.Role{process.Roles(), gvisor.Roles(), microvm.Roles()}
	role.Run(roles...) // before anything else: a role makes no directory
	var err error
	testDir, err = os.MkdirTemp("", "airlock-contract-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// Every tier's state lives under testDir: let the process tier's
	// unprivileged stages reach it.
	if err := os.Chmod(testDir, 0o711); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := roletest.Run(m, roles...)
	closeTiers()
	os.RemoveAll(testDir)
	os.Exit(code)
}

var (
	agentOnce sync.Once
	agentPath string
	agentErr  error
)

// guestAgent builds the microVM's guest agent from this checkout once, so
// the suite never runs a stale one.
func guestAgent() (string, error) {
	agentOnce.Do(func() {
		agentPath = filepath.Join(testDir, "airlock-agent")
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", agentPath, "github.com/airlock-sandbox/airlock/tiers/microvm/cmd/airlock-agent")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
		if out, err := cmd.CombinedOutput(); err != nil {
			agentErr = fmt.Errorf("building the guest agent: %v: %s", err, out)
		}
	})
	return agentPath, agentErr
}
