package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestLeanBuildLinksNoHeavyPackage: the lean build (make build's airlock)
// leaves out what its heavy commands need, whose initialisers would cost
// every start: the server, the MCP SDK, the Markdown sanitiser, the bench
// with its charts and cel-go peer.
func TestLeanBuildLinksNoHeavyPackage(t *testing.T) {
	out, err := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "list", "-tags", "lean", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -tags lean -deps: %v", err)
	}
	const module = "github.com/airlock-sandbox/airlock/"
	heavy := []string{"github.com/yuin/goldmark", "cel.dev/", "gonum.org/v1/plot", "github.com/modelcontextprotocol/", "google.golang.org/protobuf/reflect/protodesc",
		module + "server", module + "bench", module + "egress/sanitize", module + "internal/mcpwrap", module + "corpus"}
	for line := range strings.Lines(string(out)) {
		pkg := strings.TrimSpace(line)
		for _, h := range heavy {
			if strings.HasPrefix(pkg, h) {
				t.Errorf("the lean build links %s", pkg)
			}
		}
	}
}

// Every heavy command the lean build lists runs in this (full) build.
func TestHeavyCommandsRunInTheFullBuild(t *testing.T) {
	for _, c := range heavyCommands {
		if commands[c.name] != c || c.run == nil {
			t.Errorf("heavy command %s has no run function in the full build", c.name)
		}
	}
}

// A lean build runs airlock-full as its caller: only a file nobody else
// may write.
func TestFindFullOwnership(t *testing.T) {
	p := filepath.Join(t.TempDir(), "airlock-full")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AIRLOCK_AIRLOCK_FULL", p)
	if got, err := findFull(); err != nil || got != p {
		t.Fatalf("findFull() = %q, %v; want %s", got, err, p)
	}
	if err := os.Chmod(p, 0o757); err != nil {
		t.Fatal(err)
	}
	if got, err := findFull(); err == nil {
		t.Fatalf("findFull() = %q for a file others may write", got)
	}
	// Nor one another user owns (as root, the test can make one).
	if os.Geteuid() == 0 {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if got, err := findFull(); err == nil {
			t.Fatalf("findFull() = %q for a file another user owns", got)
		}
	}
	// Nor one in a directory others may write, where it could be swapped
	// between the check and the exec.
	open := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	swappable := filepath.Join(open, "airlock-full")
	if err := os.WriteFile(swappable, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AIRLOCK_AIRLOCK_FULL", swappable)
	if got, err := findFull(); err == nil {
		t.Fatalf("findFull() = %q in a directory others may write", got)
	}
	// A lean build started by a lean build does not start another.
	t.Setenv(fullEnv, "1")
	err := execFull("serve", []string{"serve"})
	if _, ok := err.(*fullMissing); !ok || exitCode(err) != exitMissing {
		t.Fatalf("execFull under %s = %v", fullEnv, err)
	}
}
