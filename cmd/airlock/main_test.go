package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"testing"

	"github.com/airlock-sandbox/airlock/corpus/runner"
	"github.com/airlock-sandbox/airlock/internal/testing/runnertest"
)

// TestMain lets the test binary stand in for the airlock binary: as a
// corpus child (runner.IsChild), or as the CLI itself for the tests that
// start a server process and kill it (AIRLOCK_CLI_CHILD=1).
func TestMain(m *testing.M) {
	if runner.IsChild() {
		os.Exit(corpusWith(context.Background(), &env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr}, testSources(), runnertest.Suites()...))
	}
	if os.Getenv("AIRLOCK_CLI_CHILD") == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}
