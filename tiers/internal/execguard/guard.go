//go:build linux

package execguard

import (
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
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
// and executes the job, the one execve the filter lets through.
func Main() int {
	f := os.NewFile(3, "guard")
	data, err := io.ReadAll(io.LimitReader(f, 256<<20))
	f.Close()
	var cfg Config
	if err == nil {
		err = json.Unmarshal(data, &cfg)
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
	if errors.Is(err, syscall.ENOENT) {
		fmt.Fprintf(os.Stderr, "airlock: program %q not found\n", cfg.Argv[0])
		return 127
	}
	fmt.Fprintf(os.Stderr, "%s: %v\n", cfg.Argv[0], err)
	return 126
}
