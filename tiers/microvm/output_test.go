package microvm

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
)

// floodSource enlarges its stdout pipe to 1 MiB, writes as many bytes as
// its argument says and exits.
const floodSource = `package main

import (
	"os"
	"strconv"
	"syscall"
)

func main() {
	if _, _, e := syscall.Syscall(syscall.SYS_FCNTL, 1, 1031, 1<<20); e != 0 { // F_SETPIPE_SZ
		os.Stderr.WriteString("F_SETPIPE_SZ: " + e.Error() + "\n")
		os.Exit(3)
	}
	n, _ := strconv.Atoi(os.Args[1])
	b := make([]byte, n)
	for i := range b {
		b[i] = 'a'
	}
	os.Stdout.Write(b)
}
`

// TestSlowReaderKeepsOutput: a job whose output the host reads slowly (a
// sink that blocks, as a slow client's stream does) keeps all of it. An
// agent that stopped waiting for the output shortly after the job ended,
// or powered off right after its exit report, dropped what the VMM had
// not delivered yet, and the run failed ("the VM exited before the job
// finished") or lost the end of its output.
func TestSlowReaderKeepsOutput(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		testenv.Skipf(t, "no Go toolchain on PATH to build the job's program with")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(floodSource), 0o644); err != nil {
		t.Fatal(err)
	}
	must(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module flood\n\ngo 1.21\n"), 0o644))
	build := exec.Command(goBin, "build", "-trimpath", "-ldflags=-s -w", "-o", "flood", ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the job's program: %v\n%s", err, out)
	}
	bin, err := os.ReadFile(filepath.Join(dir, "flood"))
	if err != nil {
		t.Fatal(err)
	}
	tier := shared.get(t, WarmCold)
	first := true
	slow := airlock.WithOutput(context.Background(), func(airlock.Stream, []byte) {
		if first { // longer than the agent ever waited for output
			first = false
			time.Sleep(3 * time.Second)
		}
	})
	const n = 1_900_000
	job := command("sh", "-c", "chmod +x flood && ./flood "+strconv.Itoa(n))
	job.Files = map[string]string{"flood": string(bin)}
	job.Grants.Spawn = true
	job.Limits.OutputBytes = 4 << 20
	res, err := tier.Run(slow, job)
	if err != nil || len(res.Stdout) != n || res.Stderr != "" {
		t.Errorf("%v, %d bytes of stdout, want %d (stderr %q)", err, len(res.Stdout), n, res.Stderr)
	}
	assertNoVMs(t, tier)
}
