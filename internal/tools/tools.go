// Package tools finds the external programs and files airlock's heavier
// tiers use (runsc, QEMU, a guest kernel, wat2wasm, bwrap) and that the
// project's set-up scripts install into a project-local .tools directory.
package tools

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/statedir"
)

// Dir returns the tools directory: $AIRLOCK_TOOLS if set; else the first
// .tools directory found walking up from the working directory or from the
// running executable (a checkout); else the first that exists of
// <executable>/../lib/airlock (what `make install PREFIX=...` writes),
// $XDG_DATA_HOME/airlock (~/.local/share/airlock) and
// /usr/local/lib/airlock. It returns "" if none exists.
//
// airlock runs the programs there, as root for the heavier tiers, so a
// directory found rather than named must pass statedir.Resolve (it and
// every directory above it belong to root, this user or sudo's caller,
// and nobody else may write them; so does every link on the way); one
// that does not is passed over. Dir returns its real path.
func Dir() string {
	d, _ := dir()
	return d
}

// dir is Dir, and why a tools directory it found was passed over.
func dir() (string, error) {
	if d := os.Getenv("AIRLOCK_TOOLS"); d != "" {
		return d, nil
	}
	var ignored error
	// found is the real path of the directory usable accepted last: the
	// one used from then on, since a name that passes through a link
	// could lead elsewhere later.
	var found string
	usable := func(d string) bool {
		st, err := os.Stat(d)
		if err != nil || !st.IsDir() {
			return false
		}
		found, err = statedir.Resolve(d)
		err = statedir.As(err, "tools directory")
		if err != nil && ignored == nil {
			ignored = err
		}
		return err == nil
	}
	if d := FindUp(func(dir string) bool { return usable(filepath.Join(dir, ".tools")) }, ".tools"); d != "" {
		return found, nil
	}
	for _, d := range installed() {
		if usable(d) {
			return found, nil
		}
	}
	return "", ignored
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
	d, ignored := dir()
	if d != "" {
		if p := filepath.Join(d, "bin", name); isExec(p) {
			err := statedir.File(p)
			if err == nil {
				return p, nil
			}
			ignored = err
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%s %w (set %s, %s)%s", name, ErrNotFound, env, installHint, passedOver(ignored))
}

// installHint says how to install a missing tool, after "set VARIABLE, ".
const installHint = "run `make setup` in a checkout, or `make install PREFIX=...` there to install airlock with it"

// passedOver says which tools directory or program was not used, and why.
func passedOver(err error) string {
	if err == nil {
		return ""
	}
	return "; passed over: " + err.Error()
}

// File locates a data file (a kernel, an initramfs) under the tools
// directory, or at the path in the named environment variable.
func File(env, rel string) (string, error) {
	if p := os.Getenv(env); p != "" {
		if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("%s=%s: %w", env, p, ErrNotFound)
		} else if err != nil {
			return "", fmt.Errorf("%s=%s: %w", env, p, err)
		}
		return p, nil
	}
	d, ignored := dir()
	if d == "" {
		return "", fmt.Errorf("%s %w: no .tools directory (set %s, %s)%s", rel, ErrNotFound, env, installHint, passedOver(ignored))
	}
	p := filepath.Join(d, rel)
	st, err := os.Stat(p)
	if err != nil {
		return "", fmt.Errorf("%s %w (set %s, %s)", p, ErrNotFound, env, installHint)
	}
	// What is found there boots guests or runs in them: it is held to the
	// tools directory's rule.
	if st.IsDir() {
		var real string
		if real, err = filepath.EvalSymlinks(p); err == nil {
			err = statedir.Check(p, real)
		}
	} else {
		err = statedir.File(p)
	}
	if err != nil {
		return "", err
	}
	return p, nil
}

func isExec(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}
