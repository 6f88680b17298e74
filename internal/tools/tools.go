// Package tools finds the external programs and files airlock's heavier
// tiers use (runsc, QEMU, a guest kernel, wat2wasm, bwrap) and that the
// project's set-up scripts install into a project-local .tools directory.
package tools

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Dir returns the tools directory: $AIRLOCK_TOOLS if set; else the first
// .tools directory found walking up from the working directory or from the
// running executable (a checkout); else the first that exists of
// <executable>/../lib/airlock (what `make install PREFIX=...` writes),
// $XDG_DATA_HOME/airlock (~/.local/share/airlock) and
// /usr/local/lib/airlock. It returns "" if none exists.
func Dir() string {
	if d := os.Getenv("AIRLOCK_TOOLS"); d != "" {
		return d
	}
	if d := FindUp(func(dir string) bool {
		st, err := os.Stat(filepath.Join(dir, ".tools"))
		return err == nil && st.IsDir()
	}, ".tools"); d != "" {
		return d
	}
	for _, d := range installed() {
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			return d
		}
	}
	return ""
}

// installed lists where an installation keeps its tools, most specific
// first.
func installed() []string {
	var dirs []string
	if exe, err := os.Executable(); err == nil {
		if real, err := filepath.EvalSymlinks(exe); err == nil {
			exe = real
		}
		dirs = append(dirs, filepath.Join(filepath.Dir(exe), "..", "lib", "airlock"))
	}
	data := os.Getenv("XDG_DATA_HOME")
	if data == "" {
		if home, err := os.UserHomeDir(); err == nil {
			data = filepath.Join(home, ".local", "share")
		}
	}
	if data != "" {
		dirs = append(dirs, filepath.Join(data, "airlock"))
	}
	return append(dirs, "/usr/local/lib/airlock")
}

// FindUp walks up from the working directory, then from the running
// executable's directory, and returns filepath.Join(dir, rel) for the
// first directory for which match is true, or "".
func FindUp(match func(dir string) bool, rel string) string {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if exe, err := os.Executable(); err == nil {
		starts = append(starts, filepath.Dir(exe))
	}
	for _, dir := range starts {
		for {
			if match(dir) {
				return filepath.Join(dir, rel)
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return ""
}

// ErrNotFound is wrapped by Find's error when a program is missing.
var ErrNotFound = errors.New("not found")

// Find locates a program: the variable AIRLOCK_<NAME> (upper case, '-' as
// '_') if set, then <tools dir>/bin/<name>, then $PATH. The error says
// where it looked and how to install it.
func Find(name string) (string, error) {
	env := "AIRLOCK_" + strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(name))
	if p := os.Getenv(env); p != "" {
		if isExec(p) {
			return p, nil
		}
		return "", fmt.Errorf("%s=%s: %w or not executable", env, p, ErrNotFound)
	}
	if d := Dir(); d != "" {
		if p := filepath.Join(d, "bin", name); isExec(p) {
			return p, nil
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%s %w (set %s, run `make setup` in a checkout, or `make install PREFIX=...` there to install airlock with it)", name, ErrNotFound, env)
}

// File locates a data file (a kernel, an initramfs) under the tools
// directory, or at the path in the named environment variable.
func File(env, rel string) (string, error) {
	if p := os.Getenv(env); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w", env, p, err)
		}
		return p, nil
	}
	d := Dir()
	if d == "" {
		return "", fmt.Errorf("%s %w: no .tools directory (set %s, or run `make setup`)", rel, ErrNotFound, env)
	}
	p := filepath.Join(d, rel)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s %w (set %s, or run `make setup`)", p, ErrNotFound, env)
	}
	return p, nil
}

func isExec(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}
