package process

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cpio"
	"github.com/airlock-sandbox/airlock/internal/testing/syncbuf"
	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
	"github.com/airlock-sandbox/airlock/internal/tools"
)

// guestEnv marks this test binary as running inside TestCgroupV2's guest.
const guestEnv = "AIRLOCK_TEST_CGROUP_V2_GUEST"

// v2GuestTests are the tests TestCgroupV2 runs again on cgroup v2: each
// one that makes, limits, joins, reads, kills or removes a job's cgroup,
// the attack corpus (fork bomb, memory cap, wall clock) among them, and
// TestCgroupV2 itself, which in the guest checks that the hierarchy is v2.
var v2GuestTests = []string{
	"TestCgroupV2",
	"TestConformance", "TestCorpus", "TestScenarios", "TestNothingLeftBehind", "TestSweep",
	"TestSessions", "TestSpareCgroup", "TestSpareCgroupUsed", "TestSpawnIntoCgroup",
	"TestGuardedConformance", "TestGuardedContainsCrashes",
}

// guestPrograms are the host programs the guest gets beside busybox: what
// the corpus runs (python3, and curl and nslookup for its egress cases),
// and the host's sh, since busybox's runs its own applets first.
var guestPrograms = []string{"/usr/bin/sh", "/usr/bin/python3", "/usr/bin/curl", "/usr/bin/nslookup"}

// TestCgroupV2 runs v2GuestTests inside a QEMU guest whose only cgroup
// hierarchy is v2, with the memory, pids and cpu controllers enabled: this
// host mounts v1 controllers, so the tier's v2 code (groups made with
// containerd's cgroup2 manager, a stage cloned straight into its group,
// cgroup.kill, memory.events) would otherwise never run. The guest is the
// microvm tier's Debian kernel with an initramfs built here: this test
// binary, the stage binary, busybox, python3 with its standard library,
// curl, nslookup and the shared libraries these need, all copied from this
// host. TestPoolClaimRefusedLimits is v1's alone (v2 reclaims rather than
// refuses a limit below the usage) and is not among them.
func TestCgroupV2(t *testing.T) {
	if os.Getenv(guestEnv) != "" {
		checkGuestCgroups(t)
		return
	}
	if cgroupV2() {
		t.Skip("this host's cgroups are v2: the package's own tests run that path here")
	}
	if runtime.GOARCH != "amd64" {
		testenv.Skipf(t, "the guest kernel is x86-64; this is %s", runtime.GOARCH)
	}
	qemu, err := tools.Find("qemu-system-x86_64")
	if err != nil {
		testenv.Skipf(t, "no QEMU for the cgroup v2 guest: %v", err)
	}
	kernel, err := tools.File("AIRLOCK_MICROVM_KERNEL", "microvm/vmlinux")
	if err != nil {
		testenv.Skipf(t, "no guest kernel for the cgroup v2 guest: %v", err)
	}
	for _, p := range append([]string{"/bin/busybox", "/usr/bin/ldd"}, guestPrograms...) {
		if _, err := os.Stat(p); err != nil {
			testenv.Skipf(t, "the cgroup v2 guest is built from this host's %s: %v", p, err)
		}
	}
	dir := t.TempDir()
	initrd := filepath.Join(dir, "guest.cpio")
	hello, err := base64.StdEncoding.DecodeString(staticBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := buildV2Guest(initrd, hello); err != nil {
		t.Fatalf("building the guest's initramfs: %v", err)
	}

	kvm := tools.KVMBoots(qemu, kernel, "")
	accel, cpu := "tcg,thread=multi", "max"
	appendLine := "console=ttyS0 quiet loglevel=1 panic=-1 rdinit=/init tsc=reliable no_timer_check"
	if kvm {
		accel, cpu = "kvm", "host"
	} else if khz := tools.TSCkHz(); khz > 0 {
		appendLine += fmt.Sprintf(" tsc_early_khz=%d", khz)
	}
	if testenv.Strict() {
		appendLine += " airlock.strict=1"
	}
	args := []string{
		"-M", "microvm,x-option-roms=off,rtc=on,pit=off,pic=off",
		"-accel", accel, "-cpu", cpu, "-m", "3072", "-smp", "2",
		"-nodefaults", "-no-user-config", "-display", "none", "-nic", "none",
		"-serial", "stdio", "-no-reboot",
		"-kernel", kernel, "-initrd", initrd, "-append", appendLine,
	}
	// Emulated, the guest is many times slower than the host.
	limit := 10 * time.Minute
	if !kvm {
		limit = 30 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	// An emulated guest on a busy host has been seen to hang in early
	// boot, printing nothing: one whose script has not started within
	// bootLimit is the emulator's trouble, not the code's, and boots once
	// more.
	const bootLimit = 3 * time.Minute
	var out *syncbuf.Buffer
	var runErr error
	start := time.Now()
	for attempt := 1; attempt <= 2; attempt++ {
		out = &syncbuf.Buffer{}
		var booted bool
		if booted, runErr = runGuest(ctx, qemu, args, out, bootLimit); booted || ctx.Err() != nil {
			break
		}
		t.Logf("attempt %d: %v", attempt, runErr)
	}
	t.Logf("guest (%s) ran %d tests in %v", accel, len(v2GuestTests), time.Since(start).Round(time.Second))

	log := strings.ReplaceAll(out.String(), "\r\n", "\n")
	code, found := guestExit(log)
	if ctx.Err() != nil || runErr != nil || !found || code != 0 {
		t.Errorf("the guest's run failed (qemu: %v, context: %v, exit line found: %v, exit %d); its output:\n%s", runErr, ctx.Err(), found, code, log)
		return
	}
	// Every test ran in the guest and passed (none skipped); the summary
	// lines go to this test's log.
	for _, name := range v2GuestTests {
		if !strings.Contains(log, "--- PASS: "+name+" (") {
			t.Errorf("%s did not pass in the guest; its output:\n%s", name, log)
		}
	}
	for _, line := range strings.Split(log, "\n") {
		if strings.HasPrefix(line, "--- ") || strings.HasPrefix(line, "airlock-guest:") {
			t.Log(line)
		}
	}
}

// checkGuestCgroups, in the guest, checks that the tests below run on the
// hierarchy they are meant for.
func checkGuestCgroups(t *testing.T) {
	if !cgroupV2() {
		t.Fatal("in the v2 guest, but the tier does not see a cgroup v2 hierarchy")
	}
	ctl, err := os.ReadFile(filepath.Join(cgroupRoot, "cgroup.subtree_control"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"memory", "pids", "cpu"} {
		if !slices.Contains(strings.Fields(string(ctl)), c) {
			t.Errorf("controller %s not enabled for the job groups (%q)", c, ctl)
		}
	}
	if err := cgroupAvailable(); err != nil {
		t.Errorf("cgroupAvailable: %v", err)
	}
}

var guestExitLine = regexp.MustCompile(`(?m)^airlock-guest: exit (\d+)$`)

func guestExit(log string) (int, bool) {
	m := guestExitLine.FindStringSubmatch(log)
	if m == nil {
		return 0, false
	}
	n, err := strconv.Atoi(m[1])
	return n, err == nil
}

// The guest's first init (in the initramfs, whose root cannot be pivoted
// away from) copies the root into a tmpfs and switches to it, so the
// sandboxes' pivot_root works; the second mounts the v2 hierarchy, enables
// its controllers for the job groups and runs the tests.
const (
	guestInit = `#!/bin/sh
export PATH=/usr/bin:/usr/sbin
mount -t tmpfs -o mode=0755 root /newroot
for d in /*; do
	case "$d" in /newroot|/proc|/sys|/dev|/init) ;; *) cp -a "$d" /newroot/ ;; esac
done
mkdir -p /newroot/proc /newroot/sys /newroot/dev /newroot/tmp /newroot/run
exec switch_root /newroot /airlock/guest.sh
`
	guestScript = `#!/bin/sh
export PATH=/usr/bin:/usr/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs -o mode=1777 shm /dev/shm
mount -t tmpfs -o mode=1777 tmp /tmp
mount -t tmpfs -o mode=0755 run /run
mount -t cgroup2 cgroup2 /sys/fs/cgroup
echo "+memory +pids +cpu" >/sys/fs/cgroup/cgroup.subtree_control
ip link set lo up
hostname airlock-v2-guest
strict=
grep -q airlock.strict=1 /proc/cmdline && strict=true
echo "airlock-guest: kernel $(uname -r), $(grep ' /sys/fs/cgroup ' /proc/mounts), controllers: $(cat /sys/fs/cgroup/cgroup.subtree_control)"
cd /airlock
env -i PATH=/usr/bin:/usr/sbin HOME=/root TMPDIR=/tmp CI="$strict" ` + guestEnv + `=1 ` + staticBinaryEnv + `=/airlock/hello \
	./process.test -test.v -test.count=1 -test.timeout=25m -test.run "$(cat /airlock/run)"
echo "airlock-guest: exit $?"
poweroff -f
`
)

// buildV2Guest writes the guest's initramfs to path.
func buildV2Guest(path string, hello []byte) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	g := &guestRoot{w: cpio.NewWriter(f), seen: map[string]bool{"/": true}}
	// The host's top-level links (/bin -> usr/bin on a merged /usr) first,
	// so that the files below land where their canonical paths say.
	for _, d := range []string{"/bin", "/sbin", "/lib", "/lib64"} {
		if target, err := os.Readlink(d); err == nil {
			g.symlink(d, target)
		}
	}
	for _, d := range []string{"/newroot", "/proc", "/sys", "/dev", "/tmp", "/run", "/root", "/airlock", "/etc"} {
		g.dirs(d)
	}
	g.w.Add(cpio.Entry{Name: "dev/console", Mode: cpio.Char | 0o600, RMajor: 5, RMinor: 1})
	g.w.Add(cpio.Entry{Name: "dev/null", Mode: cpio.Char | 0o666, RMajor: 1, RMinor: 3})
	g.file("/etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n"))
	g.file("/etc/group", 0o644, []byte("root:x:0:\nnogroup:x:65534:\n"))
	g.file("/etc/hosts", 0o644, []byte("127.0.0.1 localhost\n"))
	g.file("/init", 0o755, []byte(guestInit))
	g.file("/airlock/guest.sh", 0o755, []byte(guestScript))
	g.file("/airlock/run", 0o644, []byte("^("+strings.Join(v2GuestTests, "|")+")$"))
	g.file("/airlock/hello", 0o755, hello)

	// The host's programs, then busybox with a link per applet beside it
	// where there is no host program of that name.
	libsOf := slices.Clone(guestPrograms)
	for _, p := range guestPrograms {
		if err := g.host(p); err != nil {
			return err
		}
	}
	bb, err := filepath.EvalSymlinks("/bin/busybox")
	if err != nil {
		return err
	}
	if err := g.host(bb); err != nil {
		return err
	}
	list, err := exec.Command(bb, "--list").Output()
	if err != nil {
		return fmt.Errorf("busybox --list: %w", err)
	}
	for _, app := range strings.Fields(string(list)) {
		if app != "busybox" && app != "init" && app != "linuxrc" {
			g.symlink(filepath.Join(filepath.Dir(bb), app), "busybox")
		}
	}

	exe, err := os.Executable()
	if err != nil {
		return err
	}
	data, err := os.ReadFile(exe)
	if err != nil {
		return err
	}
	g.file("/airlock/process.test", 0o755, data)
	if sb, err := discoverStage(); err == nil && sb.separate() {
		if data, err := os.ReadFile(sb.path); err == nil {
			g.file("/airlock/"+StageBinaryName, 0o755, data)
		}
	}
	libsOf = append(libsOf, exe)

	// python3's standard library, without what no test imports.
	py, err := filepath.EvalSymlinks("/usr/bin/python3")
	if err != nil {
		return err
	}
	stdlib := filepath.Join("/usr/lib", filepath.Base(py))
	skip := map[string]bool{"test": true, "idlelib": true, "tkinter": true, "turtledemo": true, "ensurepip": true, "lib2to3": true, "pydoc_data": true, "site-packages": true, "dist-packages": true, "config-" + strings.TrimPrefix(filepath.Base(py), "python") + "-x86_64-linux-gnu": true}
	err = filepath.WalkDir(stdlib, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && skip[d.Name()] {
			return filepath.SkipDir
		}
		if d.IsDir() {
			return nil
		}
		if strings.HasSuffix(p, ".so") {
			libsOf = append(libsOf, p)
		}
		return g.host(p)
	})
	if err != nil {
		return err
	}
	for _, l := range sharedLibs(libsOf) {
		if err := g.host(l); err != nil {
			return err
		}
	}
	if err := g.w.Close(); err != nil {
		return err
	}
	return f.Close()
}

// sharedLibs lists the shared libraries (and the dynamic loader) that
// ldd says the given ELF files load.
func sharedLibs(files []string) []string {
	var out []string
	for _, f := range files {
		res, err := exec.Command("ldd", f).Output()
		if err != nil {
			continue // a static binary: ldd says so and fails
		}
		sc := bufio.NewScanner(bytes.NewReader(res))
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			for i, fld := range fields {
				if strings.HasPrefix(fld, "/") && (i == 0 || fields[i-1] == "=>") {
					out = append(out, fld)
				}
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// guestRoot adds host files to an initramfs at their own paths.
type guestRoot struct {
	w    *cpio.Writer
	seen map[string]bool
}

// dirs adds d and its missing parents.
func (g *guestRoot) dirs(d string) {
	d = filepath.Clean(d)
	if g.seen[d] {
		return
	}
	g.dirs(filepath.Dir(d))
	g.seen[d] = true
	g.w.Add(cpio.Entry{Name: d, Mode: cpio.Dir | 0o755})
}

func (g *guestRoot) file(p string, perm uint32, data []byte) {
	g.dirs(filepath.Dir(p))
	g.seen[p] = true
	g.w.Add(cpio.Entry{Name: p, Mode: cpio.File | perm, Data: data})
}

func (g *guestRoot) symlink(p, target string) {
	if g.seen[p] {
		return
	}
	g.dirs(filepath.Dir(p))
	g.seen[p] = true
	g.w.Add(cpio.Entry{Name: p, Mode: cpio.Symlink | 0o777, Data: []byte(target)})
}

// host adds the host's file p (a regular file or a symlink, followed), at
// its path with its parent directories resolved.
func (g *guestRoot) host(p string) error {
	parent, err := filepath.EvalSymlinks(filepath.Dir(p))
	if err != nil {
		return err
	}
	p = filepath.Join(parent, filepath.Base(p))
	if g.seen[p] {
		return nil
	}
	st, err := os.Lstat(p)
	if err != nil {
		return err
	}
	switch {
	case st.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(p)
		if err != nil {
			return err
		}
		g.symlink(p, target)
		if !filepath.IsAbs(target) {
			target = filepath.Join(parent, target)
		}
		return g.host(target)
	case st.Mode().IsRegular():
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		g.file(p, uint32(st.Mode().Perm()), data)
		return nil
	default:
		return fmt.Errorf("%s: neither a file nor a symlink", p)
	}
}

// runGuest runs qemu until it exits, or kills it (booted false) if the
// guest's script has not started within bootLimit.
func runGuest(ctx context.Context, qemu string, args []string, out *syncbuf.Buffer, bootLimit time.Duration) (booted bool, err error) {
	cmd := exec.CommandContext(ctx, qemu, args...)
	cmd.WaitDelay = 5 * time.Second
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return true, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	boot := time.NewTimer(bootLimit)
	defer boot.Stop()
	select {
	case err := <-done:
		return true, err
	case <-boot.C:
		if strings.Contains(out.String(), "airlock-guest: kernel") {
			return true, <-done
		}
		_ = cmd.Process.Kill()
		<-done
		return false, fmt.Errorf("the guest printed nothing in %v", bootLimit)
	}
}
