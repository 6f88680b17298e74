package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestInterruptStopsTheRun: Ctrl-C (SIGINT) in the middle of `airlock run`
// stops the program and exits 3 with one line saying the run was
// interrupted, the same words on every tier, not the Go context's.
func TestInterruptStopsTheRun(t *testing.T) {
	needProcess(t)
	tiers := []string{"process"}
	r, closeAll, err := (&routerFlags{}).open()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"gvisor", "microvm"} {
		if r.Unavailable(name) == nil {
			tiers = append(tiers, name)
		}
	}
	closeAll()
	for _, tier := range tiers {
		cmd := exec.Command(os.Args[0], "run", "--tier", tier, "--allow-spawn", "--wall", "60s", "--", "sh", "-c", "echo started; sleep 57; echo never")
		cmd.Env = append(os.Environ(), "AIRLOCK_CLI_CHILD=1")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, _ := bufio.NewReader(out).ReadString('\n')
		if line != "started\n" {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("%s: first line %q; stderr: %s", tier, line, stderr.String())
		}
		start := time.Now()
		_ = cmd.Process.Signal(syscall.SIGINT)
		err = cmd.Wait()
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != exitStopped {
			t.Errorf("%s: after SIGINT: %v, want exit %d; stderr: %s", tier, err, exitStopped, stderr.String())
		}
		if d := time.Since(start); d > 20*time.Second {
			t.Errorf("%s: SIGINT took %v to stop the run", tier, d)
		}
		got := stderr.String()
		if strings.Count(got, "\n") != 1 || !strings.Contains(got, "interrupt signal received") || strings.Contains(got, "context canceled") {
			t.Errorf("%s: stderr %q: want one line saying the run was interrupted", tier, got)
		}
	}
}
