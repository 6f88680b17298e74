package wasm

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testing/tiertest"
	"github.com/airlock-sandbox/airlock/internal/tools"
)

// buildDir holds the modules the tests build; TestMain removes it.
var buildDir string

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(runHelper())
	}
	dir, err := os.MkdirTemp("", "airlock-wasm-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	buildDir = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

type built struct {
	once sync.Once
	bin  []byte
	err  error
}

var (
	goBuilds  sync.Map // package path -> *built
	watBuilds sync.Map // file -> *built
)

// goModule builds a Go package of this module for GOOS=wasip1 (once per
// test binary) and returns the module's bytes. cshared builds a reactor
// (-buildmode=c-shared), whose //go:wasmexport functions can be called.
func goModule(t testing.TB, pkg string, cshared bool) []byte {
	t.Helper()
	key := fmt.Sprintf("%s/%v", pkg, cshared)
	v, _ := goBuilds.LoadOrStore(key, &built{})
	b := v.(*built)
	b.once.Do(func() {
		out := filepath.Join(buildDir, fmt.Sprintf("go-%d.wasm", hash(key)))
		args := []string{"build", "-o", out}
		if cshared {
			args = append(args, "-buildmode=c-shared")
		}
		cmd := exec.Command(goTool(), append(args, pkg)...)
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			b.err = fmt.Errorf("go build %s: %v\n%s", pkg, err, stderr.String())
			return
		}
		b.bin, b.err = os.ReadFile(out)
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.bin
}

func hash(s string) uint32 {
	var h uint32 = 2166136261
	for i := 0; i < len(s); i++ {
		h = (h ^ uint32(s[i])) * 16777619
	}
	return h
}

func goTool() string {
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// guest is the Go test program (wasm/testdata/guest).
func guest(t testing.TB) []byte {
	return goModule(t, "./testdata/guest", false)
}

// watFile compiles a WAT file with wat2wasm (installed by
// scripts/setup-wabt.sh); a missing wat2wasm makes the test unavailable.
func watFile(t testing.TB, path string) []byte {
	t.Helper()
	v, _ := watBuilds.LoadOrStore(path, &built{})
	b := v.(*built)
	b.once.Do(func() {
		w2w, err := tools.Find("wat2wasm")
		if err != nil {
			b.err = err
			return
		}
		out := filepath.Join(buildDir, fmt.Sprintf("wat-%d.wasm", hash(path)))
		cmd := exec.Command(w2w, path, "-o", out)
		if msg, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("wat2wasm %s: %v\n%s", path, err, msg)
			return
		}
		b.bin, b.err = os.ReadFile(out)
	})
	if b.err != nil {
		if _, ferr := tools.Find("wat2wasm"); ferr != nil {
			tiertest.Unavailable(t, Name, fmt.Errorf("the tests' WAT modules need wat2wasm (scripts/setup-wabt.sh): %w", ferr))
		}
		t.Fatal(b.err)
	}
	return b.bin
}

// wat compiles inline WAT source.
func wat(t testing.TB, src string) []byte {
	t.Helper()
	p := filepath.Join(buildDir, fmt.Sprintf("inline-%d.wat", hash(src)))
	if _, err := os.Stat(p); err != nil {
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return watFile(t, p)
}

// corpusWAT returns the module of a corpus case kept as corpus/wasm/NAME.wat.
func corpusWAT(t testing.TB, name string) []byte {
	return watFile(t, filepath.Join("..", "corpus", "wasm", name+".wat"))
}
