package corpus

import (
	"encoding/base64"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
)

// StaticBinaryB64 builds a small static Go program printing "hello from a
// static Go binary", base64-encoded: the value of ${STATIC_BINARY_B64}. It
// returns "" when there is no Go toolchain (cases using it are skipped).
// The tiers' corpus tests and `airlock corpus` use it, so every runner offers the same set.
func StaticBinaryB64() string {
	staticOnce.Do(func() { staticB64 = buildStatic() })
	return staticB64
}

var (
	staticOnce sync.Once
	staticB64  string
)

func buildStatic() string {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return ""
	}
	dir, err := os.MkdirTemp("", "airlock-static-")
	if err != nil {
		return ""
	}
	defer os.RemoveAll(dir)
	src := "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"hello from a static Go binary\") }\n"
	if os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644) != nil ||
		os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module hello\n\ngo 1.21\n"), 0o644) != nil {
		return ""
	}
	cmd := exec.Command(goBin, "build", "-trimpath", "-ldflags=-s -w", "-o", "hello", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	if cmd.Run() != nil {
		return ""
	}
	bin, err := os.ReadFile(filepath.Join(dir, "hello"))
	if err != nil {
		return ""
	}
	return base64.StdEncoding.EncodeToString(bin)
}
