//go:build linux

package execguard

import (
	"embed"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"

	"github.com/airlock-sandbox/airlock/role"
)

// RoleName is the role (see package role) of a process that acts as the
// guard: it reads a Config from descriptor 3 and executes that program
// under the filter. The process tier's stage roles include it, so a small
// stage binary, or a large binary dispatching its roles early, serves it
// without the rest of airlock's start-up.
const RoleName = "gvisor-exec-guard"

// Arg is the guard's argument after its own path, which tells it apart in
// a process listing.
const Arg = "airlock-gvisor-exec-guard"

// Config is what a guard is handed on descriptor 3: the program to
// execute, its argv and its environment.
type Config struct {
	Path string   `json:"path"`
	Argv []string `json:"argv"`
	Env  []string `json:"env"`
}

// Sources is this package's code, part of the stage code digest (a stage
// binary serving the guard must carry this guard).
//
//go:embed *.go
var Sources embed.FS

// Main is the guard: started as the job's user in place of the job, it
// installs the filter under which the job cannot execute another program
// and executes the job, the one execve the filter lets through. Started
// as `guard Arg -- PROGRAM ARGS...` it executes that program, looked up in
// its own PATH, with its own environment (a sandbox's first process);
// otherwise it reads a Config from descriptor 3.
func Main() int {
	var cfg Config
	var err error
	if len(os.Args) > 3 && os.Args[1] == Arg && os.Args[2] == "--" {
		cfg.Argv = os.Args[3:]
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, role.Env+"=") { // what started the guard, not the job's
				cfg.Env = append(cfg.Env, kv)
			}
		}
		if cfg.Path, err = LookPath(cfg.Argv[0], os.Getenv("PATH")); err != nil {
			code, line, _ := StartFailure(cfg.Argv[0], err)
			fmt.Fprintln(os.Stderr, line)
			return code
		}
	} else {
		f := os.NewFile(3, "guard")
		var data []byte
		data, err = io.ReadAll(io.LimitReader(f, 256<<20))
		f.Close()
		if err == nil {
			err = json.Unmarshal(data, &cfg)
		}
	}
	if err != nil || len(cfg.Argv) == 0 {
		fmt.Fprintf(os.Stderr, "airlock: bad exec guard configuration: %v\n", err)
		return 126
	}
	// The key lives only in this process, which the exec replaces.
	k, err := NewKey()
	if err == nil {
		err = Install(k)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "airlock: spawn filter: %v\n", err)
		return 126
	}
	err = Exec(cfg.Path, cfg.Argv, cfg.Env, k)
	if code, line, ok := StartFailure(cfg.Argv[0], err); ok {
		fmt.Fprintln(os.Stderr, line)
		return code
	}
	fmt.Fprintf(os.Stderr, "airlock: starting %q: %v\n", cfg.Argv[0], err)
	return 126
}

// LookPath resolves a program name against the colon-separated
// directories of path, as a shell would (a name with a slash is taken as
// it is; an empty entry is the working directory). It does without
// os/exec, which the stage binary does not carry.
func LookPath(name, path string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	for _, dir := range strings.Split(path, ":") {
		if dir == "" {
			dir = "."
		}
		p := dir + "/" + name
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", syscall.ENOENT
}
