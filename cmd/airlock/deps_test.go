package main

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestBinariesLinkNoTestSupport keeps test support out of the shipped
// binaries: nothing under internal/testing, no package named *test, and
// nothing that imports testing (or testing itself).
func TestBinariesLinkNoTestSupport(t *testing.T) {
	const module = "github.com/airlock-sandbox/airlock"
	// The runtime's own: package sync imports it in every Go program.
	allowed := map[string]bool{"internal/synctest": true}
	for _, bin := range []string{"/cmd/airlock", "/cmd/airlock lean", "/tiers/process/cmd/airlock-stage", "/tiers/microvm/cmd/airlock-agent"} {
		bin, tags, _ := strings.Cut(bin, " ")
		cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "list", "-tags", tags, "-deps", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", module+bin)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", bin, err)
		}
		for line := range strings.Lines(string(out)) {
			fields := strings.Fields(line)
			if len(fields) == 0 {
				continue
			}
			pkg := fields[0]
			var why string
			switch {
			case allowed[pkg]:
			case strings.HasPrefix(pkg, module+"/internal/testing/"):
				why = "is under internal/testing"
			case pkg == "testing" || strings.HasPrefix(pkg, "testing/"):
				why = "is the testing package"
			case strings.HasSuffix(pkg[strings.LastIndex(pkg, "/")+1:], "test"):
				why = "is named *test"
			default:
				for _, imp := range fields[1:] {
					if imp == "testing" {
						why = "imports testing"
					}
				}
			}
			if why != "" {
				t.Errorf("%s links %s, which %s", bin[1:], pkg, why)
			}
		}
	}
}
