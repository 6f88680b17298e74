package main

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
	"github.com/airlock-sandbox/airlock/internal/testing/tiertest"
)

// TestRunStreamsOutput: `airlock run` (the test binary as the CLI) writes
// the program's first line to its stdout pipe while the program waits for
// the test to have read it; the rest follows, and the exit code is the
// program's.
func TestRunStreamsOutput(t *testing.T) {
	job, open := tiertest.ShellGate(t)
	cmd := exec.Command(os.Args[0], "run", "--tier", "process", "--allow-spawn", "--read", job.Grants.FS.Read[0], "--wall", "60s", "--", "sh", "-c", job.Argv[2]+"; exit 3")
	cmd.Env = append(os.Environ(), "AIRLOCK_CLI_CHILD=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	r := bufio.NewReader(stdout)
	first, err := r.ReadString('\n')
	if err != nil || first != "first\n" {
		rest, _ := io.ReadAll(r)
		if cmd.Wait(); cmd.ProcessState.ExitCode() == exitMissing {
			testenv.Skipf(t, "the process tier is unavailable: %s", errOut.String())
		}
		t.Fatalf("first line %q (%v), then %q; stderr %s", first, err, rest, errOut.String())
	}
	open() // the program goes on only now
	rest, _ := io.ReadAll(r)
	err = cmd.Wait()
	if string(rest) != "second\n" {
		t.Fatalf("then %q; stderr %s", rest, errOut.String())
	}
	if code := cmd.ProcessState.ExitCode(); code != 3 {
		t.Fatalf("exit %d (%v), want the program's 3; stderr %s", code, err, errOut.String())
	}
	if want := "note\nairlock: program exited with status 3\n"; errOut.String() != want {
		t.Fatalf("stderr %q, want %q", errOut.String(), want)
	}
}
