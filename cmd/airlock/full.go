package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/airlock-sandbox/airlock/internal/statedir"
	"github.com/airlock-sandbox/airlock/internal/tools"
)

// fullName is the build with every command, installed beside a lean
// airlock (see heavy.go).
const fullName = "airlock-full"

// fullEnv marks a process that a lean airlock started as airlock-full: a
// lean build that finds it set was itself started so, and refuses to
// delegate again.
const fullEnv = "AIRLOCK_DELEGATED"

// fullMissing is a heavy command a lean build cannot run: airlock-full is
// not installed (exitMissing, like any missing backend).
type fullMissing struct {
	cmd string
	err error
}

func (f *fullMissing) Error() string {
	return fmt.Sprintf("%s is in %s, the build with every command: %v", f.cmd, fullName, f.err)
}

// execFull replaces this process with airlock-full running args (this
// command's arguments, the binary's name left out); it returns only when
// that fails. cmd names the command in the error.
func execFull(cmd string, args []string) error {
	if os.Getenv(fullEnv) != "" {
		return &fullMissing{cmd: cmd, err: errors.New("the airlock-full found is a lean build too (build it without -tags lean)")}
	}
	full, err := findFull()
	if errors.Is(err, tools.ErrNotFound) {
		err = errors.New("it is not beside this airlock, and AIRLOCK_AIRLOCK_FULL, the tools directory and $PATH have none (make build and make install put it there; go build ./cmd/airlock builds one binary with every command)")
	}
	if err != nil {
		return &fullMissing{cmd: cmd, err: err}
	}
	argv := append([]string{"airlock"}, args...)
	err = syscall.Exec(full, argv, append(os.Environ(), fullEnv+"=1"))
	return fmt.Errorf("running %s: %w", full, err)
}

// findFull looks beside the running executable first, then where tools are
// found (AIRLOCK_AIRLOCK_FULL, the tools directory, $PATH). The binary it
// runs as this user must be a regular file owned by root or this user (or
// sudo's caller) that nobody else may write or replace: in directories
// that pass the same rule (statedir.File), so that it cannot be swapped
// between the check and the exec.
func findFull() (string, error) {
	p := ""
	if exe, err := os.Executable(); err == nil {
		if exe, err = filepath.EvalSymlinks(exe); err == nil {
			if beside := filepath.Join(filepath.Dir(exe), fullName); isExecutable(beside) {
				p = beside
			}
		}
	}
	if p == "" {
		var err error
		if p, err = tools.Find(fullName); err != nil {
			return "", err
		}
	}
	if err := statedir.File(p); err != nil {
		return "", err
	}
	return p, nil
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}
