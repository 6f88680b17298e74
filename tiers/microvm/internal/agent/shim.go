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
	"unsafe"

	"golang.org/x/sys/unix"
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
	path := ""
	if cfg.Root != "" {
		path = cfg.Env["PATH"]
	}
	prog, err := lookPath(argv[0], path)
	if err != nil {
		die("%v", err)
	}
	// Mapped while the shim may still map the page (see execPage).
	var execPath *byte
	if !cfg.Spawn {
		if execPath, err = mapExecPath(prog); err != nil {
			die("spawn filter: %v", err)
		}
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
		if err := denySpawn(); err != nil {
			die("spawn filter: %v", err)
		}
		die("exec %s: %v", argv[0], execAt(execPath, argv, env))
	}
	if err := syscall.Exec(prog, argv, env); err != nil {
		die("exec %s: %v", argv[0], err)
	}
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
	return "", fmt.Errorf("program %q not found", name)
}

// execPage is where the shim puts the program's path for its own execve:
// the one execve the spawn filter lets through names it. The page lies
// below vm.mmap_min_addr, which only CAP_SYS_RAWIO in the initial user
// namespace may map: the shim, root in the guest, can; the job, after the
// exec that discards the mapping, cannot, so every execve it tries points
// elsewhere (or faults) and is refused.
const execPage = 0x1000

// mapExecPath maps execPage and writes prog there, NUL-terminated, and
// returns the pointer to hand execve.
func mapExecPath(prog string) (*byte, error) {
	minAddr, err := os.ReadFile("/proc/sys/vm/mmap_min_addr")
	if err != nil {
		return nil, err
	}
	var min uint64
	if _, err := fmt.Sscan(string(minAddr), &min); err != nil || min < 2*execPage {
		return nil, fmt.Errorf("vm.mmap_min_addr is %q: the job could map the exec page", strings.TrimSpace(string(minAddr)))
	}
	if len(prog)+1 > execPage {
		return nil, fmt.Errorf("program path of %d bytes is too long", len(prog))
	}
	// A fixed address no Go pointer holds: the runtime never maps so low.
	fixed := unsafe.Add(unsafe.Pointer(nil), execPage)
	p, err := unix.MmapPtr(-1, 0, fixed, execPage, unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED_NOREPLACE)
	if err != nil || p != fixed {
		return nil, fmt.Errorf("mapping the exec page: %v", err)
	}
	page := unsafe.Slice((*byte)(p), execPage)
	copy(page, prog)
	page[len(prog)] = 0
	return &page[0], nil
}

// execAt executes argv[0]'s resolved path from the exec page.
func execAt(path *byte, argv, env []string) error {
	argvp, err := syscall.SlicePtrFromStrings(argv)
	if err != nil {
		return err
	}
	envp, err := syscall.SlicePtrFromStrings(env)
	if err != nil {
		return err
	}
	_, _, errno := unix.RawSyscall(unix.SYS_EXECVE, uintptr(unsafe.Pointer(path)),
		uintptr(unsafe.Pointer(&argvp[0])), uintptr(unsafe.Pointer(&envp[0])))
	return errno
}

// denySpawn installs a seccomp filter under which the job cannot execute
// another program: execve is allowed only from the exec page (the shim's
// own exec of the job; see execPage) and execveat never, both refused with
// EACCES. Forking is allowed — a shell's subshells and pipes of builtins
// work — within the pids limit. Foreign-ABI (x32, i386) syscalls are
// refused or kill.
func denySpawn() error {
	const (
		ldW    = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq    = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		jge    = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
		ret    = unix.BPF_RET | unix.BPF_K
		eacces = unix.SECCOMP_RET_ERRNO | uint32(unix.EACCES)
	)
	prog := []unix.SockFilter{
		{Code: ldW, K: 4}, // arch
		{Code: jeq, Jt: 1, K: unix.AUDIT_ARCH_X86_64},
		{Code: ret, K: unix.SECCOMP_RET_KILL_PROCESS},
		{Code: ldW, K: 0},                             // 3: nr
		{Code: jge, Jt: 6, K: 0x40000000},             // x32 -> 11
		{Code: jeq, Jt: 5, K: unix.SYS_EXECVEAT},      // -> 11
		{Code: jeq, Jt: 0, Jf: 5, K: unix.SYS_EXECVE}, // -> 7 / 12
		{Code: ldW, K: 20},                            // 7: args[0], high word
		{Code: jeq, Jt: 0, Jf: 2, K: 0},               // -> 9 / 11
		{Code: ldW, K: 16},                            // 9: args[0], low word
		{Code: jeq, Jt: 1, Jf: 0, K: execPage},        // -> 12 / 11
		{Code: ret, K: eacces},                        // 11
		{Code: ret, K: unix.SECCOMP_RET_ALLOW},        // 12
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog))); e != 0 {
		return e
	}
	return nil
}
