package runner

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/airlock-sandbox/airlock/corpus"
	"github.com/airlock-sandbox/airlock/internal/statedir"
	"github.com/airlock-sandbox/airlock/internal/tools"
)

// FindSource returns the root of an airlock source tree at or above the
// working directory (or the running program), or "" if there is none. A
// tree someone other than root, this user or sudo's caller could change is
// passed over: its programs are built here, with its tools.
func FindSource() string {
	// The tree's real path: a name through a link could lead elsewhere
	// later.
	var real string
	if tools.FindUp(func(dir string) bool {
		if !fileExists(filepath.Join(dir, "corpus", "wasm")) || !fileExists(filepath.Join(dir, "wasm", "testdata", "guest")) {
			return false
		}
		var err error
		real, err = statedir.Resolve(dir)
		return err == nil
	}, "") == "" {
		return ""
	}
	return real
}

// SourceModules builds the WASM cases' modules from a source tree, the way
// the WASM tier's own tests do: corpus/wasm/NAME.wat (with wat2wasm) for the
// case wasm/NAME when that file exists, else the Go wasip1 test program
// wasm/testdata/guest (with the Go toolchain), whose first argument picks
// what it does. Modules are built once, into a temporary directory that the
// returned function removes.
func SourceModules(root string) (ModuleSource, func(), error) {
	dir, err := os.MkdirTemp("", "airlock-corpus-modules-")
	if err != nil {
		return nil, nil, err
	}
	var (
		mu     sync.Mutex
		builds = map[string]*build{}
	)
	get := func(key string, make func(out string) error) (string, error) {
		mu.Lock()
		b, ok := builds[key]
		if !ok {
			b = &build{}
			builds[key] = b
		}
		mu.Unlock()
		b.once.Do(func() {
			b.path = filepath.Join(dir, fmt.Sprintf("m%d.wasm", len(builds)))
			b.err = make(b.path)
		})
		return b.path, b.err
	}
	src := func(c *corpus.Case) (string, error) {
		// corpus/wasm/NAME.wat, or PREFIX.wat for a case named
		// PREFIX-MORE (cases can share a module), as the tier's tests do.
		name := strings.TrimPrefix(c.ID, "wasm/")
		wat := ""
		for n := name; n != ""; {
			if cand := filepath.Join(root, "corpus", "wasm", n+".wat"); fileExists(cand) {
				wat = cand
				break
			}
			i := strings.LastIndexByte(n, '-')
			if i < 0 {
				break
			}
			n = n[:i]
		}
		if wat != "" {
			return get(wat, func(out string) error {
				w2w, err := tools.Find("wat2wasm")
				if err != nil {
					return fmt.Errorf("the module of %s needs wat2wasm (scripts/setup-wabt.sh): %w", c.ID, err)
				}
				return run(exec.Command(w2w, "-o", out, wat))
			})
		}
		return get("guest", func(out string) error {
			goTool, err := exec.LookPath("go")
			if err != nil {
				return fmt.Errorf("the WASM guest program needs the Go toolchain: %w", err)
			}
			cmd := exec.Command(goTool, "build", "-o", out, "./wasm/testdata/guest")
			cmd.Dir = root
			cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
			return run(cmd)
		})
	}
	return src, func() { _ = os.RemoveAll(dir) }, nil
}

type build struct {
	once sync.Once
	path string
	err  error
}

func run(cmd *exec.Cmd) error {
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return errors.New(strings.TrimSpace(fmt.Sprintf("%s: %v\n%s", filepath.Base(cmd.Path), err, stderr.String())))
	}
	return nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
