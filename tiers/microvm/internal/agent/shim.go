//go:build linux

package agent

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/tiers/internal/execguard"
)

// shimConfig is what the agent tells the shim about the job.
type shimConfig struct {
	Argv      []string          `json:"argv"`
	Env       map[string]string `json:"env,omitempty"`
	CPUMS     int64             `json:"cpu_ms"`
	OpenFiles int64             `json:"open_files"`
	Spawn     bool              `json:"spawn"`
	// Root, when set, is the image root to chroot into (set by the
	// agent, never by the host).
	Root string `json:"root,omitempty"`
}

// searchPath is where a bare program name is looked up (the job's own
// environment holds only its secrets, so it has no PATH of its own).
var searchPath = []string{"/bin", "/sbin", "/usr/bin", "/usr/sbin", "/usr/local/bin"}

// shim is started in the job's cgroup as root before the job is known.
// It waits for its configuration on fd 3 (closed by the agent after one
// write), drops to the job's user with its limits and filter, and executes
// the job.
func shim() {
	die := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "airlock: "+format+"\n", args...)
		os.Exit(127)
	}
	cfgFile := os.NewFile(3, "config")
	data, err := io.ReadAll(io.LimitReader(cfgFile, 64<<20))
	cfgFile.Close()
	var cfg shimConfig
	if err != nil || json.Unmarshal(data, &cfg) != nil || len(cfg.Argv) == 0 {
		die("bad shim configuration")
	}
	argv := cfg.Argv
	env := make([]string, 0, len(cfg.Env))
	for _, k := range sortedKeys(cfg.Env) {
		env = append(env, k+"="+cfg.Env[k])
	}
	if cfg.CPUMS > 0 {
		sec := uint64((cfg.CPUMS + 999) / 1000)
		if err := unix.Setrlimit(unix.RLIMIT_CPU, &unix.Rlimit{Cur: sec, Max: sec + 1}); err != nil {
			die("cpu limit: %v", err)
		}
	}
	if cfg.OpenFiles > 0 {
		n := uint64(cfg.OpenFiles)
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: n, Max: n}); err != nil {
			die("open-files limit: %v", err)
		}
	}
	_ = unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{})
	if cfg.Root != "" {
		// The job keeps no way out: it runs without privileges (no
		// CAP_SYS_CHROOT) and holds no descriptor of the initramfs.
		if err := unix.Chroot(cfg.Root); err != nil {
			die("entering the image root: %v", err)
		}
		if err := unix.Chdir(scratchDir); err != nil {
			die("entering the scratch: %v", err)
		}
	}
	// The job's PATH (the baseline's where neither job nor image sets
	// one), in the host view as in an image.
	// A program that cannot be started is reported as on every tier:
	// 127 not there, 126 not executable, in one line.
	startFailed := func(err error) {
		code, line, ok := execguard.StartFailure(argv[0], err)
		if !ok {
			die("exec %s: %v", argv[0], err)
		}
		fmt.Fprintln(os.Stderr, line)
		os.Exit(code)
	}
	prog, err := lookPath(argv[0], cfg.Env["PATH"])
	if err != nil {
		startFailed(err)
	}
	if err := syscall.Setgroups(nil); err != nil {
		die("setgroups: %v", err)
	}
	if err := syscall.Setgid(JobUID); err != nil {
		die("setgid: %v", err)
	}
	if err := syscall.Setuid(JobUID); err != nil {
		die("setuid: %v", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		die("no_new_privs: %v", err)
	}
	if !cfg.Spawn {
		// The one exec the filter lets through is this one: the key lives
		// only in this process, which the exec replaces.
		k, err := execguard.NewKey()
		if err == nil {
			err = execguard.Install(k)
		}
		if err != nil {
			die("spawn filter: %v", err)
		}
		startFailed(execguard.Exec(prog, argv, env, k))
	}
	startFailed(syscall.Exec(prog, argv, env))
}

// lookPath finds a bare name in path (the job's PATH, an image's) or,
// without one, in searchPath.
func lookPath(name, path string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	dirs := searchPath
	if path != "" {
		dirs = filepath.SplitList(path)
	}
	for _, dir := range dirs {
		if !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("program %q not found: %w", name, syscall.ENOENT)
}
