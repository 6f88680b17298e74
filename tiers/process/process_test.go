package process

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/corpus"
	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
	"github.com/airlock-sandbox/airlock/internal/testing/tiertest"
	"github.com/airlock-sandbox/airlock/tiers/process/internal/stage"
)

// testConfig keeps every host-side trace of the tests under one temporary
// base directory per test.
// sandboxLeftovers lists what is in baseDir but the owners' leases, which
// a process holds for its life and a sweep removes after it.
func sandboxLeftovers(baseDir string) []os.DirEntry {
	entries, _ := os.ReadDir(baseDir)
	return slices.DeleteFunc(entries, func(e os.DirEntry) bool { return e.Name() == filepath.Base(owners(baseDir)) })
}

func testConfig(t testing.TB) Config {
	base := filepath.Join(t.TempDir(), "base")
	ws := filepath.Join(t.TempDir(), "ws")
	// The level-2 sandboxes run as other uids and need to reach their
	// scratch and workspace directories.
	for _, d := range []string{filepath.Dir(base), filepath.Dir(ws), filepath.Dir(filepath.Dir(base)), filepath.Dir(filepath.Dir(ws))} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	return NewConfig().WithBaseDir(base).WithWorkspaceDir(ws)
}

type tierCase struct {
	name  string
	level airlock.Level
}

var bothTiers = []tierCase{{NameContainer, airlock.LevelContainer}, {NameFilter, airlock.LevelSyscallFilter}}

func newTestTier(t testing.TB, tc tierCase, cfg Config, opts ...option) *Tier {
	t.Helper()
	tier, err := newTier(tc.name, tc.level, cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := tier.Available(); err != nil {
		tiertest.Unavailable(t, tier.Name(), err)
	}
	t.Cleanup(func() { tier.Close() })
	return tier
}

// forBothTiers runs fn as a subtest for each tier, on a fresh
// configuration and tier.
func forBothTiers(t *testing.T, fn func(t *testing.T, tier *Tier, cfg Config)) {
	for _, tc := range bothTiers {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			fn(t, newTestTier(t, tc, cfg), cfg)
		})
	}
}

// cmdJob is a command job granted spawn: the tests' shell scripts run
// other programs, and test other capabilities (the contract suite,
// tiers/contract, tests spawn withheld).
func cmdJob(argv ...string) airlock.Job {
	return airlock.Job{Kind: airlock.KindCommand, Argv: argv, Grants: airlock.Grants{Spawn: true}}
}

func ptr[T any](v T) *T { return &v }

func TestConformance(t *testing.T) {
	for _, tc := range bothTiers {
		t.Run(tc.name, func(t *testing.T) {
			tier := newTestTier(t, tc, testConfig(t))
			before := runtime.NumGoroutine()
			tiertest.Suite{
				Tier: tier,
				OK:   cmdJob("sh", "-c", "echo ok"),
				Check: func(t testing.TB, res airlock.Result) {
					if res.Stdout != "ok\n" {
						t.Errorf("stdout %q, want %q", res.Stdout, "ok\n")
					}
				},
				Spin:  ptr(cmdJob("sh", "-c", "while :; do :; done")),
				Flood: ptr(cmdJob("sh", "-c", "while :; do echo flooding flooding flooding; done")),
				Env:   ptr(cmdJob("sh", "-c", "echo $"+tiertest.CanaryEnv+"; env")),
				Bulk:  ptr(cmdJob("head", "-c", "60000", "/dev/zero")), BulkBytes: 60_000,
			}.Run(t)
			// Close ends what lives as long as the tier (the /etc
			// template's thread); nothing of the runs may be left.
			if err := tier.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
			tiertest.NoGoroutineLeak(t, before)
		})
	}
}

// canaries are the secrets a corpus run must never leak.
type canaries struct {
	vars    map[string]string
	secrets []string
}

func setupCanaries(t *testing.T) canaries {
	t.Helper()
	secret := fmt.Sprintf("canary-file-%d", time.Now().UnixNano())
	dir := t.TempDir() // 0700, root's
	file := filepath.Join(dir, "secret.txt")
	if err := os.WriteFile(file, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	envName := "AIRLOCK_CORPUS_CANARY"
	envValue := fmt.Sprintf("canary-env-%d", time.Now().UnixNano())
	t.Setenv(envName, envValue)

	// A world-connectable host Unix socket and an abstract one, each
	// answering with a secret.
	sockSecret := fmt.Sprintf("canary-socket-%d", time.Now().UnixNano())
	sockDir := filepath.Join(t.TempDir(), "sock")
	if err := os.Mkdir(sockDir, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Dir(sockDir), 0o755)
	sockPath := filepath.Join(sockDir, "host.sock")
	abstract := fmt.Sprintf("airlock-canary-%d", time.Now().UnixNano())
	for _, addr := range []string{sockPath, "@" + abstract} {
		ln, err := net.Listen("unix", addr)
		if err != nil {
			t.Fatal(err)
		}
		if addr == sockPath {
			os.Chmod(sockPath, 0o777)
		}
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Write([]byte(sockSecret))
				c.Close()
			}
		}()
		t.Cleanup(func() { ln.Close(); wg.Wait() })
	}
	return canaries{
		vars: map[string]string{
			"CANARY_FILE": file, "CANARY_ENV": envName, "HOST_SOCKET": sockPath, "HOST_ABSTRACT": abstract,
			"STATIC_BINARY_B64": staticBinary(t),
		},
		secrets: []string{secret, envValue, sockSecret},
	}
}

var (
	staticOnce sync.Once
	staticB64  string
	staticErr  error
)

// staticBinaryEnv names a prebuilt static test program, for a test run
// with no Go toolchain (TestCgroupV2's guest).
const staticBinaryEnv = "AIRLOCK_TEST_STATIC_BINARY"

// staticBinary builds a static Go program and returns it base64-encoded.
func staticBinary(t *testing.T) string {
	t.Helper()
	staticOnce.Do(func() {
		if p := os.Getenv(staticBinaryEnv); p != "" { // prebuilt (TestCgroupV2's guest)
			bin, err := os.ReadFile(p)
			staticB64, staticErr = base64.StdEncoding.EncodeToString(bin), err
			return
		}
		dir, err := os.MkdirTemp("", "airlock-static-")
		if err != nil {
			staticErr = err
			return
		}
		defer os.RemoveAll(dir)
		src := "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"hello from a static Go binary\") }\n"
		os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644)
		os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module hello\n\ngo 1.21\n"), 0o644)
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", "hello", ".")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
		if out, err := cmd.CombinedOutput(); err != nil {
			staticErr = fmt.Errorf("building static binary: %v\n%s", err, out)
			return
		}
		bin, err := os.ReadFile(filepath.Join(dir, "hello"))
		staticB64, staticErr = base64.StdEncoding.EncodeToString(bin), err
	})
	if staticErr != nil {
		t.Fatal(staticErr)
	}
	return staticB64
}

// TestCorpus runs every command case on both tiers, with a host sentinel
// process that must survive them all (kill -9 -1, ptrace, ...).
func TestCorpus(t *testing.T) {
	cases, err := corpus.Load("command")
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) == 0 {
		t.Fatal("no command cases")
	}
	cn := setupCanaries(t)
	sentinel := exec.Command("sleep", "600")
	if err := sentinel.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sentinel.Process.Kill(); sentinel.Wait() }()
	forBothTiers(t, func(t *testing.T, tier *Tier, cfg Config) {
		for _, c := range cases {
			if !c.Applies(tier.Name()) {
				continue
			}
			t.Run(strings.TrimPrefix(c.ID, "command/"), func(t *testing.T) {
				if why := c.SkipReason(cn.vars); why != "" {
					testenv.Skipf(t, "%s", why)
				}
				v := c.Run(context.Background(), tier, cn.vars, cn.secrets...)
				if !v.Pass {
					t.Errorf("%s on %s: %s (outcome %s)", c.ID, tier.Name(), v.Detail, v.Outcome)
				}
			})
		}
		assertClean(t, tier, cfg)
	})
	if err := sentinel.Process.Signal(syscall0); err != nil {
		t.Fatalf("host sentinel process did not survive the corpus: %v", err)
	}
}

// TestScenarios checks what the corpus cannot express as data.
func TestScenarios(t *testing.T) {
	forBothTiers(t, func(t *testing.T, tier *Tier, cfg Config) {
		ctx := context.Background()

		t.Run("GrantedReadPath", func(t *testing.T) {
			// World-readable, as a level-2 grant still needs the uid's permission.
			dir, err := os.MkdirTemp("", "airlock-grant-")
			if err != nil {
				t.Fatal(err)
			}
			defer os.RemoveAll(dir)
			os.WriteFile(filepath.Join(dir, "data.txt"), []byte("granted"), 0o644)
			os.Chmod(filepath.Join(dir, "data.txt"), 0o644)
			os.Chmod(dir, 0o755)
			job := cmdJob("sh", "-c", "cat "+filepath.Join(dir, "data.txt")+"; echo x > "+filepath.Join(dir, "new.txt")+" && echo WROTE")
			job.Grants.FS.Read = []string{dir}
			res, err := tier.Run(ctx, job)
			if err != nil || !strings.HasPrefix(res.Stdout, "granted") || strings.Contains(res.Stdout, "WROTE") {
				t.Fatalf("granted read: %v %+v", err, res)
			}
		})
		t.Run("MissingGrantedPath", func(t *testing.T) {
			job := cmdJob("true")
			job.Grants.FS.Read = []string{"/nonexistent/airlock/path"}
			_, err := tier.Run(ctx, job)
			var inv *airlock.InvalidJob
			if tier.Level() == airlock.LevelContainer && !asErr(err, &inv) {
				t.Fatalf("want InvalidJob for a missing granted path, got %v", err)
			}
		})
		t.Run("ProgramNotFound", func(t *testing.T) {
			res, err := tier.Run(ctx, cmdJob("no-such-program-airlock"))
			if err != nil || res.ExitCode != 127 || !strings.Contains(res.Stderr, "not found") {
				t.Fatalf("want exit 127 with a message, got %v %+v", err, res)
			}
		})
		t.Run("ProgramByPath", func(t *testing.T) {
			// As on every tier (tiers/contract): a path that is not
			// there exits 127, one that cannot be executed 126, each
			// with its one line.
			for argv0, want := range map[string]struct {
				code int
				line string
			}{
				"./no-such-program": {127, "airlock: program \"./no-such-program\" not found\n"},
				"/etc":              {126, "airlock: program \"/etc\" cannot be executed: permission denied\n"},
			} {
				res, err := tier.Run(ctx, cmdJob(argv0))
				if err != nil || res.ExitCode != want.code || res.Stderr != want.line {
					t.Errorf("%s: want exit %d with %q, got %v %d %q", argv0, want.code, want.line, err, res.ExitCode, res.Stderr)
				}
			}
		})
		t.Run("NetGrant", func(t *testing.T) {
			job := cmdJob("true")
			job.Grants.Net = []airlock.NetRule{{Host: "example.com"}}
			_, err := tier.Run(ctx, job)
			var na *airlock.NotAdmitted
			if tier.Level() == airlock.LevelSyscallFilter && (!asErr(err, &na) || !strings.Contains(na.Reason, "network")) {
				t.Fatalf("want NotAdmitted for egress, got %v", err)
			}
			if tier.Level() == airlock.LevelContainer && err != nil {
				t.Fatalf("net-granted job: %v", err)
			}
			if tier.Admit(airlock.Job{Kind: airlock.KindExpr, Code: "1"}) == nil {
				t.Fatal("admitted an expr job")
			}
		})
		t.Run("CPULimit", func(t *testing.T) {
			job := cmdJob("sh", "-c", "while :; do :; done")
			job.Limits = airlock.Limits{CPUMS: 300, WallMS: 20000}
			_, err := tier.Run(ctx, job)
			wantStop(t, err, airlock.StopCPU)
		})
		t.Run("SandboxView", func(t *testing.T) {
			res, err := tier.Run(ctx, cmdJob("sh", "-c", "id -u; cat /proc/self/status | grep -E '^(Seccomp|NoNewPrivs|CapEff)'; ls /; readlink /proc/self/ns/time || true"))
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"Seccomp:\t2", "NoNewPrivs:\t1", "CapEff:\t0000000000000000"} {
				if !strings.Contains(res.Stdout, want) {
					t.Errorf("sandbox view lacks %q:\n%s", want, res.Stdout)
				}
			}
			if tier.Level() == airlock.LevelContainer {
				for _, absent := range []string{"root\n", "home\n", "var\n", "sys\n", "run\n"} {
					if strings.Contains(res.Stdout, absent) {
						t.Errorf("container root shows %q:\n%s", absent, res.Stdout)
					}
				}
				// The program runs in a time namespace of its own.
				if host, err := os.Readlink("/proc/self/ns/time"); err == nil && (strings.Contains(res.Stdout, host) || !strings.Contains(res.Stdout, "time:[")) {
					t.Errorf("the program's time namespace is not its own (host %s):\n%s", host, res.Stdout)
				}
			}
		})
		assertClean(t, tier, cfg)
	})
}

func asErr[T error](err error, target *T) bool {
	return err != nil && errorsAs(err, target)
}

func wantStop(t *testing.T, err error, reason airlock.StopReason) {
	t.Helper()
	s, ok := airlock.AsStop(err)
	if !ok || s.Reason != reason {
		t.Fatalf("want stopped:%s, got %v", reason, err)
	}
}

// assertClean checks that no sandbox of this process is left: no cgroup,
// no scratch mount or directory, no process running as a sandbox uid.
//
// Used sandboxes are destroyed in the background, so it closes the tier
// first: Close waits for those clean-ups and reports any that failed.
func assertClean(t *testing.T, tier *Tier, cfg Config) {
	t.Helper()
	if err := tier.Close(); err != nil {
		t.Errorf("clean-up: %v", err)
	}
	mine := namePrefix + strconv.Itoa(os.Getpid()) + "-"
	for _, name := range leftoverCgroups() {
		if strings.HasPrefix(name, mine) {
			t.Errorf("cgroup %s left behind", name)
		}
	}
	if m := leftoverMounts(cfg.baseDir); len(m) > 0 {
		t.Errorf("scratch mounts left behind: %v", m)
	}
	if entries := sandboxLeftovers(cfg.baseDir); len(entries) > 0 {
		t.Errorf("scratch directories left behind: %v", entries)
	}
	if procs := sandboxProcesses(cfg); len(procs) > 0 {
		t.Errorf("sandbox processes left behind: %v", procs)
	}
}

// sandboxProcesses lists processes whose real uid is in the sandbox range,
// which started after this test process (zombies an earlier, killed run
// left to an init that does not reap are not this run's) and which descend
// from it (other test binaries running sandboxes at the same time, as
// `go test ./...` does, are not this run's either). Orphans re-parented
// away from us are caught by the cgroup check instead.
func sandboxProcesses(cfg Config) []string {
	self := startTime(strconv.Itoa(os.Getpid()))
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil || startTime(e.Name()) < self || !descendsFromUs(e.Name()) {
			continue
		}
		for _, line := range bytes.Split(data, []byte("\n")) {
			if f := strings.Fields(string(line)); len(f) > 1 && f[0] == "Uid:" {
				if uid, err := strconv.ParseUint(f[1], 10, 32); err == nil && uint32(uid) >= cfg.uidBase && uint32(uid)-cfg.uidBase < cfg.uidCount {
					cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
					state := ""
					for _, l := range strings.Split(string(data), "\n") {
						if strings.HasPrefix(l, "State:") || strings.HasPrefix(l, "PPid:") {
							state += " " + strings.Join(strings.Fields(l), " ")
						}
					}
					out = append(out, fmt.Sprintf("%s(%s%s)", e.Name(), strings.ReplaceAll(string(cmdline), "\x00", " "), state))
				}
			}
		}
	}
	return out
}

// descendsFromUs reports whether pid's chain of parents reaches this
// process.
func descendsFromUs(pid string) bool {
	me := strconv.Itoa(os.Getpid())
	for range 64 {
		data, err := os.ReadFile(filepath.Join("/proc", pid, "status"))
		if err != nil {
			return false
		}
		parent := ""
		for _, l := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(l, "PPid:"); ok {
				parent = strings.TrimSpace(v)
			}
		}
		switch parent {
		case me:
			return true
		case "", "0", "1":
			return false
		}
		pid = parent
	}
	return false
}

// startTime returns a process's start time in clock ticks after boot.
func startTime(pid string) uint64 {
	data, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return 0
	}
	// Fields after the command (which may contain spaces) start after ')'.
	rest := string(data[bytes.LastIndexByte(data, ')')+1:])
	f := strings.Fields(rest)
	if len(f) < 20 {
		return 0
	}
	n, _ := strconv.ParseUint(f[19], 10, 64)
	return n
}

// TestNoInheritedDescriptors: a descriptor the tier's process holds
// without close-on-exec (as a supervisor's pipe or a careless caller's
// file may be) does not reach the sandboxed program, at either level,
// started through the spawner or not.
func TestNoInheritedDescriptors(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "canary")
	if err := os.WriteFile(secret, []byte("inherited-canary"), 0o644); err != nil {
		t.Fatal(err)
	}
	fd, err := syscall.Open(secret, syscall.O_RDONLY, 0) // no O_CLOEXEC
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	script := fmt.Sprintf("if [ -e /proc/self/fd/%d ]; then echo LEAK; cat /proc/self/fd/%d; fi; ls /proc/self/fd", fd, fd)
	for _, tc := range bothTiers {
		for _, direct := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/direct=%v", tc.name, direct), func(t *testing.T) {
				cfg := testConfig(t)
				tier := newTestTier(t, tc, cfg, withDirectStarts(direct))
				res, err := tier.Run(context.Background(), cmdJob("sh", "-c", script))
				if err != nil {
					t.Fatalf("%v\n%s", err, res.Stderr)
				}
				if strings.Contains(res.Stdout, "LEAK") || strings.Contains(res.Stdout, "inherited-canary") {
					t.Fatalf("the program got descriptor %d:\n%s", fd, res.Stdout)
				}
				// ls's own: 0, 1, 2 and the directory it reads.
				if got := strings.Fields(res.Stdout); len(got) > 4 {
					t.Errorf("the program holds more than its standard descriptors: %v", got)
				}
				assertClean(t, tier, cfg)
			})
		}
	}
}

// TestStdStreamsByName: the program may open its standard streams again
// by name (/dev/stdin, /dev/stdout, /dev/stderr, /proc/self/fd/N) at both
// levels, as on every other tier (tiers/contract, std-streams-by-name,
// holds the container to it beside gVisor and the microVM).
func TestStdStreamsByName(t *testing.T) {
	script := `read a < /dev/stdin; echo "in $a"; echo out > /dev/stdout; echo err > /dev/stderr; echo fd > /proc/self/fd/1; echo "rc=$?"`
	for _, tc := range bothTiers {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			tier := newTestTier(t, tc, cfg)
			job := cmdJob("sh", "-c", script)
			job.Stdin = "x\n"
			res, err := tier.Run(context.Background(), job)
			if err != nil {
				t.Fatalf("%v\n%s", err, res.Stderr)
			}
			if res.Stdout != "in x\nout\nfd\nrc=0\n" || res.Stderr != "err\n" {
				t.Errorf("stdout %q, stderr %q; want \"in x\\nout\\nfd\\nrc=0\\n\" and \"err\\n\"", res.Stdout, res.Stderr)
			}
			assertClean(t, tier, cfg)
		})
	}
}

// TestHostViewEnvironment: in the host view both levels give the
// baseline every tier gives (PATH, HOME, TMPDIR, LANG), then the job's
// env; the level-2 sandbox, which has no /scratch or /tmp of its own, has
// HOME and TMPDIR at its scratch directory, its working directory. A
// variable the job sets stays the job's.
func TestHostViewEnvironment(t *testing.T) {
	for _, tc := range bothTiers {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			tier := newTestTier(t, tc, cfg)
			job := cmdJob("sh", "-c", `tr '\0' '\n' < /proc/$$/environ | sort; echo "pwd=$(pwd)"`)
			job.Env = map[string]string{"MODE": "x"}
			res, err := tier.Run(context.Background(), job)
			if err != nil {
				t.Fatalf("%v\n%s", err, res.Stderr)
			}
			home, tmp := "/scratch", "/tmp"
			if tc.name == NameFilter {
				_, pwd, _ := strings.Cut(res.Stdout, "pwd=")
				home = strings.TrimSpace(pwd)
				tmp = home
			}
			want := fmt.Sprintf("HOME=%s\nLANG=C.UTF-8\nMODE=x\nPATH=%s\nTMPDIR=%s\npwd=%s\n", home, image.DefaultPATH, tmp, home)
			if res.Stdout != want {
				t.Errorf("environment:\n%s\nwant:\n%s", res.Stdout, want)
			}
			job.Env = map[string]string{"HOME": "/elsewhere", "TMPDIR": "/t"}
			res, err = tier.Run(context.Background(), job)
			if err != nil || !strings.Contains(res.Stdout, "HOME=/elsewhere\n") || !strings.Contains(res.Stdout, "TMPDIR=/t\n") {
				t.Errorf("the job's HOME and TMPDIR: %v\n%s", err, res.Stdout)
			}
			assertClean(t, tier, cfg)
		})
	}
}

// TestContainerRootMount shows a container's root is read-only, nosuid,
// nodev and noatime, for a pooled sandbox (which runs the egress
// forwarder beside the stage while the root is built) and a cold one.
// Without noatime, the forwarder's first access to a fresh symlink such as
// /lib updates its access time, which counts as a writer for an instant
// and can make the stage's read-only remount fail with EBUSY.
func TestContainerRootMount(t *testing.T) {
	for _, pooled := range []bool{false, true} {
		t.Run(fmt.Sprintf("pooled=%v", pooled), func(t *testing.T) {
			cfg := testConfig(t)
			if pooled {
				cfg = cfg.WithPool(1)
			}
			tier := newTestTier(t, bothTiers[0], cfg)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := tier.WaitWarm(ctx); err != nil {
				t.Fatal(err)
			}
			res, err := tier.Run(ctx, cmdJob("sh", "-c", `while read -r _ _ _ _ point opts _; do [ "$point" = / ] && echo "$opts"; done < /proc/self/mountinfo`))
			if err != nil {
				t.Fatalf("%v\n%s", err, res.Stderr)
			}
			if pooled && tier.PoolStats().Hits != 1 {
				t.Fatal("the job did not run in a pooled sandbox")
			}
			opts := strings.Split(strings.TrimSpace(res.Stdout), ",")
			for _, want := range []string{"ro", "nosuid", "nodev", "noatime"} {
				if !slices.Contains(opts, want) {
					t.Errorf("root mount options %q lack %s", res.Stdout, want)
				}
			}
			assertClean(t, tier, cfg)
		})
	}
}

// TestPID1IgnoresTheProgram: the container's PID 1 (the stage) outlives
// every signal the program may send it, so the run is reported as it
// ended, not as killed.
func TestPID1IgnoresTheProgram(t *testing.T) {
	tier := newTestTier(t, bothTiers[0], testConfig(t))
	res, err := tier.Run(context.Background(), cmdJob("sh", "-c",
		`for s in TERM QUIT SEGV HUP INT USR1 USR2 ABRT BUS FPE ILL TRAP SYS PIPE ALRM XCPU; do kill -s $s 1; done; sleep 0.2; echo alive`))
	if err != nil || res.ExitCode != 0 || res.Stopped != nil || res.Stdout != "alive\n" {
		t.Fatalf("%v: exit %d, stopped %v, stdout %q, stderr %q", err, res.ExitCode, res.Stopped, res.Stdout, res.Stderr)
	}
}

// TestStageIgnoresTheProgram: a level-2 program, the same uid as the stage
// that supervises it and in the host's PID namespace, cannot end the stage
// with a signal: not by its parent's pid, its process group or kill -1 (on
// any kernel), nor, where Landlock scopes signals (ABI 6), through any of
// the stage's threads or a /proc descriptor of it. A stage that died would
// end the run as killed.
func TestStageIgnoresTheProgram(t *testing.T) {
	tier := newTestTier(t, bothTiers[1], testConfig(t))
	run := func(t *testing.T, job airlock.Job) {
		t.Helper()
		res, err := tier.Run(context.Background(), job)
		if err != nil || res.ExitCode != 0 || res.Stopped != nil || !strings.HasSuffix(res.Stdout, "alive\n") || strings.Contains(res.Stdout, "some allowed") {
			t.Fatalf("%v: exit %d, stopped %v, stdout %q, stderr %q", err, res.ExitCode, res.Stopped, res.Stdout, res.Stderr)
		}
	}
	t.Run("by-number", func(t *testing.T) {
		// The stage leads its process group; /proc does not show it
		// (see TestFilterHidesOtherProcesses), else its stat names it.
		run(t, cmdJob("sh", "-c", `pg=$PPID; if read -r stat < /proc/$PPID/stat 2>/dev/null; then set -- $stat; pg=$5; fi
			for s in KILL STOP TERM; do kill -s $s $PPID; kill -s $s -$pg; done; kill -s KILL -1; sleep 0.2; echo alive`))
	})
	t.Run("threads-and-pidfds", func(t *testing.T) {
		if abi := stage.LandlockABI(); abi < 6 {
			t.Skipf("Landlock ABI %d scopes no signals (6 does, from Linux 6.12)", abi)
		}
		if _, err := exec.LookPath("python3"); err != nil {
			testenv.Skipf(t, "python3 (scripts/setup-python.sh installs it) is missing: %v", err)
		}
		job := cmdJob("python3", "-c", `
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
stage = os.getppid()
try:
    tids = [int(t) for t in os.listdir("/proc/%d/task" % stage)]
except FileNotFoundError:
    # /proc does not show the stage: its threads were made right after it.
    tids = [t for t in range(stage, stage + 64) if not os.path.exists("/proc/%d" % t)]
allowed = 0
for tid in tids:
    allowed += libc.syscall(200, tid, 9) == 0             # tkill
    allowed += libc.syscall(234, stage, tid, 9) == 0      # tgkill
try:
    fd = os.open("/proc/%d" % stage, os.O_RDONLY | os.O_DIRECTORY)
    allowed += libc.syscall(424, fd, 9, None, 0) == 0     # pidfd_send_signal
except FileNotFoundError:
    pass
allowed += libc.syscall(434, stage, 0) >= 0               # pidfd_open
print("some allowed" if allowed else "all refused")
import time; time.sleep(0.2)
print("alive")
`)
		run(t, job)
	})
}

// TestStreamsOutput: the first line reaches the sink while the job waits
// for the test to have seen it.
func TestStreamsOutput(t *testing.T) {
	forBothTiers(t, func(t *testing.T, tier *Tier, cfg Config) {
		job, open := tiertest.ShellGate(t)
		tiertest.CheckGated(t, tiertest.Gated(t, tier, job, "first\n", open))
	})
}
