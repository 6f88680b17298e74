package role_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/role"
)

// testRoles are the roles this test binary can be started in; earlyRoles
// serves one of them for some processes, and declines the others.
var (
	testRoles = []role.Role{
		{Name: "test-exit-7", Main: func() int { fmt.Print("role ran"); return 7 }},
	}
	earlyRoles = []role.Role{
		{Name: "test-exit-7", Wants: func() bool { return os.Getenv("ROLE_TEST_EARLY") == "1" }, Main: func() int { fmt.Print("early role ran"); return 8 }},
	}
)

func TestMain(m *testing.M) {
	role.RunEarly(earlyRoles)
	role.Run(nil, testRoles)
	os.Exit(m.Run())
}

// start runs this test binary with env, running only TestMainRan, and
// returns its exit status, standard output and standard error.
func start(t *testing.T, env ...string) (int, string, string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^TestMainRan$", "-test.count=1")
	cmd.Env = append([]string{"ROLE_TEST_CHILD=1"}, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
}

// TestMainRan is what a child started without a role runs: the binary's
// own main (here the tests).
func TestMainRan(t *testing.T) {
	if os.Getenv("ROLE_TEST_CHILD") == "1" {
		fmt.Print("main ran")
	}
}

func TestRole(t *testing.T) {
	code, out, errOut := start(t, role.Env+"=test-exit-7")
	if code != 7 || out != "role ran" {
		t.Errorf("in its role: status %d, stdout %q, stderr %q; want 7, %q", code, out, errOut, "role ran")
	}
	code, out, errOut = start(t, role.Env+"=test-exit-7", "ROLE_TEST_EARLY=1")
	if code != 8 || out != "early role ran" {
		t.Errorf("in its early role: status %d, stdout %q, stderr %q; want 8, %q", code, out, errOut, "early role ran")
	}
}

// TestNoRole: without the variable, or with it empty, the binary runs its
// own main and never a role.
func TestNoRole(t *testing.T) {
	for _, env := range [][]string{nil, {role.Env + "="}, {"AIRLOCK_ROLE=test-exit-7"}} {
		code, out, errOut := start(t, env...)
		if code != 0 || !strings.Contains(out, "main ran") || strings.Contains(out, "role ran") {
			t.Errorf("env %q: status %d, stdout %q, stderr %q; want main only", env, code, out, errOut)
		}
	}
}

// TestUnknownRole: a role this binary does not serve is refused with one
// line naming it, and status 2; nothing else runs.
func TestUnknownRole(t *testing.T) {
	code, out, errOut := start(t, role.Env+"=gvisor-agent")
	if code != 2 || out != "" {
		t.Errorf("status %d, stdout %q; want 2 and nothing", code, out)
	}
	lines := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], `unknown role "gvisor-agent"`) || !strings.Contains(lines[0], role.Env) {
		t.Errorf("stderr %q: want one line naming the unknown role and %s", errOut, role.Env)
	}
}
