package process

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
	"github.com/airlock-sandbox/airlock/internal/testing/tiertest"
	"github.com/airlock-sandbox/airlock/role"
	"github.com/airlock-sandbox/airlock/tiers/process/internal/stage"
	"golang.org/x/sys/unix"
)

// parentOf reads a process's parent pid from /proc.
func parentOf(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "PPid:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	t.Fatalf("no PPid for %d", pid)
	return 0
}

// TestSpawner: containers are started by the tier's spawner (a pooled
// sandbox's stage is its child, with a pidfd here); when the spawner dies,
// the sandboxes it started die with it and are seen to, and the next job
// gets a new spawner; Close leaves no spawner behind.
func TestSpawner(t *testing.T) {
	cfg := testConfig(t).WithPool(1)
	tier := newTestTier(t, bothTiers[0], cfg)
	waitPoolFilled(t, tier, 1)
	sb := pooledSandbox(t, tier)
	sp := tier.spawn.current()
	if sp == nil || sb.pidfd == nil {
		t.Fatalf("the pooled sandbox was not started by a spawner (spawner %v, pidfd %v)", sp, sb.pidfd)
	}
	if got := parentOf(t, sb.pid); got != sp.proc.Pid {
		t.Fatalf("the stage's parent is %d, not the spawner %d", got, sp.proc.Pid)
	}
	checkSpawnerFds(t, sp.proc.Pid, sb)
	checkRuns(t, tier) // claims the pooled sandbox

	waitPoolFilled(t, tier, 1)
	sb = pooledSandbox(t, tier)
	if err := sp.proc.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sb.waitCh:
	case <-time.After(10 * time.Second):
		t.Fatal("a sandbox of the killed spawner was not seen to end")
	}
	if st, err := os.ReadFile("/proc/" + strconv.Itoa(sb.pid) + "/stat"); err == nil && !strings.Contains(string(st), ") Z ") {
		t.Fatalf("the stage %d outlived its spawner: %s", sb.pid, st)
	}
	// The dead pooled sandbox is discarded; the next job runs.
	res, err := tier.Run(context.Background(), cmdJob("sh", "-c", "echo again"))
	if err != nil || res.Stdout != "again\n" {
		t.Fatalf("after the spawner died: %v %q %q", err, res.Stdout, res.Stderr)
	}
	next := tier.spawn.current()
	if next == nil || next == sp {
		t.Fatal("no new spawner after the first died")
	}
	assertClean(t, tier, cfg)
	if err := syscall.Kill(next.proc.Pid, 0); err == nil {
		t.Fatalf("the spawner %d outlived Close", next.proc.Pid)
	}
}

// TestSpawnerAhead: a container start begins the tier's spawner ahead
// (see spawners.startAhead), which the start then uses; a second request
// ahead while one runs starts no second spawner; and a spawner started
// ahead does not outlive Close, even when Close comes at once.
func TestSpawnerAhead(t *testing.T) {
	cfg := testConfig(t)
	tier := newTestTier(t, bothTiers[0], cfg)
	bin, err := tier.stageBin()
	if err != nil {
		t.Fatal(err)
	}
	tier.spawn.startAhead(bin)
	var sp *spawner
	for deadline := time.Now().Add(10 * time.Second); sp == nil; {
		if time.Now().After(deadline) {
			t.Fatal("no spawner was started ahead")
		}
		time.Sleep(time.Millisecond)
		sp = tier.spawn.current()
	}
	tier.spawn.startAhead(bin)
	checkRuns(t, tier)
	if got := tier.spawn.current(); got != sp {
		t.Fatalf("a second spawner (%v) replaced the one started ahead (%v)", got, sp)
	}
	if n := spawnersOf(t, os.Getpid()); n != 1 {
		t.Fatalf("%d spawners run for one tier", n)
	}
	assertClean(t, tier, cfg)
	if err := syscall.Kill(sp.proc.Pid, 0); err == nil {
		t.Fatalf("the spawner %d outlived Close", sp.proc.Pid)
	}
	for range 10 {
		tier, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		tier.spawn.startAhead(bin)
		if err := tier.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// A request ahead that lost the race with Close starts nothing; one
	// that won it was stopped by Close. Give a late one time to show.
	time.Sleep(100 * time.Millisecond)
	if n := spawnersOf(t, os.Getpid()); n != 0 {
		t.Fatalf("%d spawners outlived their tiers' Close", n)
	}
}

// spawnersOf counts the live spawners among pid's children.
func spawnersOf(t *testing.T, pid int) int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.HasPrefix(string(cmdline), "airlock-spawner\x00") {
			continue
		}
		st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil || strings.Contains(string(st), ") Z ") {
			continue
		}
		if fields := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+1:])); len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			n++
		}
	}
	return n
}

// TestGuardedSpawner: guarded workers are started by their tier's spawner
// too, and Close stops it.
func TestGuardedSpawner(t *testing.T) {
	g := newGuarded(t, "expr")
	if err := g.WaitWarm(context.Background()); err != nil {
		t.Fatal(err)
	}
	sp := g.spawn.current()
	g.mu.Lock()
	p := g.pool
	g.mu.Unlock()
	w := p.Ready(poolKey{})[0]
	if sp == nil || w.pidfd == nil || parentOf(t, w.pid) != sp.proc.Pid {
		t.Fatalf("the worker %d was not started by a spawner (%v)", w.pid, sp)
	}
	res, err := g.Run(context.Background(), exprJob("6 * 7"))
	if err != nil || res.Value != int64(42) {
		t.Fatalf("%v %#v", err, res.Value)
	}
	g.Close()
	if err := syscall.Kill(sp.proc.Pid, 0); err == nil {
		t.Fatalf("the spawner %d outlived Close", sp.proc.Pid)
	}
}

// TestContainerDirect: with no spawner to be had, containers start from
// the tier's process, run, are killed at the wall clock, and leave
// nothing behind.
func TestContainerDirect(t *testing.T) {
	cfg := testConfig(t)
	tier := newTestTier(t, bothTiers[0], cfg, withDirectStarts(true))
	checkRuns(t, tier)
	spin := cmdJob("sh", "-c", "while :; do :; done")
	spin.Limits.WallMS = 300
	_, err := tier.Run(context.Background(), spin)
	if s, ok := airlock.AsStop(err); !ok || s.Reason != airlock.StopTimeout {
		t.Fatalf("want a timeout, got %v", err)
	}
	if sp := tier.spawn.current(); sp != nil {
		t.Fatal("a spawner was started")
	}
	assertClean(t, tier, cfg)
}

// TestSpawnerDiesWithCaller: when the tier's process dies (SIGKILL, no
// clean-up), its spawner dies and so do the sandboxes the spawner started;
// the start-up sweep then removes what the dead process left.
func TestSpawnerDiesWithCaller(t *testing.T) {
	if err := probe(); err != nil {
		tiertest.Unavailable(t, NameContainer, err)
	}
	cfg := testConfig(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	child := exec.Command(self)
	child.Env = append(os.Environ(), role.Env+"="+spawnerCallerRole, callerEnv+"="+cfg.baseDir)
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer child.Process.Kill()
	var spawnerPid, stagePid int
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if _, err := fmt.Sscanf(sc.Text(), "PIDS %d %d", &spawnerPid, &stagePid); err == nil {
			break
		}
	}
	if spawnerPid == 0 || stagePid == 0 {
		t.Fatalf("the helper reported no pids: %v", sc.Err())
	}
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	gone := func(pid int) bool {
		st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		return err != nil || strings.Contains(string(st), ") Z ")
	}
	deadline := time.Now().Add(10 * time.Second)
	for !(gone(spawnerPid) && gone(stagePid)) {
		if time.Now().After(deadline) {
			t.Fatalf("after the caller died: spawner %d gone %v, stage %d gone %v", spawnerPid, gone(spawnerPid), stagePid, gone(stagePid))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := Sweep(cfg.baseDir); err != nil {
		t.Fatalf("sweep: %v", err)
	}
	dead := namePrefix + strconv.Itoa(child.Process.Pid) + "-"
	for _, name := range leftoverCgroups() {
		if strings.HasPrefix(name, dead) {
			t.Errorf("cgroup %s of the dead caller survived the sweep", name)
		}
	}
	if entries := sandboxLeftovers(cfg.baseDir); len(entries) > 0 {
		t.Errorf("left in the base directory after the sweep: %v", entries)
	}
}

// callerEnv names the base directory in which the dying caller (see
// spawnerCaller) starts its tier.
const callerEnv = "AIRLOCK_TEST_SPAWNER_CALLER"

// spawnerCallerRole is TestSpawnerDiesWithCaller's child: it starts a
// pooled container, prints its spawner's and its stage's pids, and waits
// to be killed.
const spawnerCallerRole = "test-spawner-caller"

func spawnerCaller() int {
	base := os.Getenv(callerEnv)
	tier, err := New(NewConfig().WithBaseDir(base).WithPool(1))
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	for deadline := time.Now().Add(time.Minute); tier.PoolStats().Ready < 1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			fmt.Println("ERROR pool did not fill")
			os.Exit(1)
		}
	}
	sb := tier.pool.Ready(poolKey{})[0]
	fmt.Printf("PIDS %d %d\n", tier.spawn.current().proc.Pid, sb.pid)
	time.Sleep(time.Minute)
	return 1
}

// checkSpawnerFds: the spawner holds none of sb's pipes after starting it
// (sb's exit would then not be seen as end of file), and its socket has no
// path another process could connect to.
func checkSpawnerFds(t *testing.T, pid int, sb *sandbox) {
	t.Helper()
	pipes := map[string]bool{}
	for _, f := range []*os.File{sb.spec, sb.statusR, sb.stdin, sb.stdout, sb.stderr} {
		if st, err := f.Stat(); err == nil {
			pipes[fmt.Sprintf("pipe:[%d]", st.Sys().(*syscall.Stat_t).Ino)] = true
		}
	}
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	unixSockets, err := os.ReadFile("/proc/net/unix")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		link, err := os.Readlink(dir + "/" + e.Name())
		if err != nil {
			continue
		}
		switch {
		case pipes[link]:
			t.Errorf("the spawner holds the sandbox's %s (fd %s)", link, e.Name())
		case strings.HasPrefix(link, "socket:["):
			ino := strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")
			for _, line := range strings.Split(string(unixSockets), "\n") {
				if f := strings.Fields(line); len(f) > 7 && f[6] == ino {
					t.Errorf("the spawner's socket (fd %s) is bound to %s", e.Name(), f[7])
				}
			}
		}
	}
	if len(pipes) != 5 {
		t.Fatalf("found %d of the sandbox's pipes to look for", len(pipes))
	}
}

// TestSpareNetns: a cold container without egress, and a guarded worker,
// start in a network namespace the spawner made ahead (as root, which CI
// is), one per sandbox: three at once see three namespaces, none the
// host's; inside, there is only a loopback that is down, a listener on the
// host's loopback cannot be reached, and the sandbox's root cannot bring
// lo up, change a sysctl or bind a low port (as in a namespace of its own,
// where the program runs without capabilities). A container with egress gets a namespace of its
// own as before (its forwarder sets lo up).
func TestSpareNetns(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skipf(t, "network namespaces made ahead need root (CAP_SYS_ADMIN in the initial user namespace); without it every sandbox gets CLONE_NEWNET, as the other tests show")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var reached atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			reached.Add(1)
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	host, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	tier := newTestTier(t, bothTiers[0], testConfig(t))
	script := fmt.Sprintf(`
import os, socket, sys
print("ns", os.readlink("/proc/self/ns/net"))
print("ifaces", sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").readlines()[2:]))
s = socket.socket()
s.settimeout(1)
try:
    s.connect(("127.0.0.1", %d)); print("connect reached")
except OSError as e:
    print("connect refused", e.errno)
try:
    open("/proc/sys/net/ipv4/ip_forward", "w").write("1"); print("sysctl written")
except OSError as e:
    print("sysctl refused", e.errno)
import fcntl, struct
try:
    fcntl.ioctl(socket.socket(), 0x8914, struct.pack("16sH", b"lo", 1)); print("lo up")
except OSError as e:
    print("lo refused", e.errno)
b = socket.socket()
try:
    b.bind(("0.0.0.0", 80)); print("bound 80")
except OSError as e:
    print("bind refused", e.errno)
import time; time.sleep(0.5)
`, port)
	var wg sync.WaitGroup
	outs := make([]string, 3)
	errs := make([]error, 3)
	for i := range outs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := tier.Run(context.Background(), cmdJob("python3", "-c", script))
			if err == nil && res.ExitCode != 0 {
				err = fmt.Errorf("exit %d: %s", res.ExitCode, res.Stderr)
			}
			outs[i], errs[i] = res.Stdout, err
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	for i, out := range outs {
		if errs[i] != nil {
			t.Fatalf("job %d: %v", i, errs[i])
		}
		ns := ""
		for _, line := range strings.Split(out, "\n") {
			if v, ok := strings.CutPrefix(line, "ns "); ok {
				ns = v
			}
		}
		if ns == "" || ns == host || seen[ns] {
			t.Fatalf("job %d ran in network namespace %q (host %s, others %v)", i, ns, host, seen)
		}
		seen[ns] = true
		for _, want := range []string{"ifaces ['lo']", "connect refused", "sysctl refused", "lo refused", "bind refused"} {
			if !strings.Contains(out, want) {
				t.Errorf("job %d: no %q in:\n%s", i, want, out)
			}
		}
	}
	if reached.Load() != 0 {
		t.Fatalf("a sandbox reached the host's loopback listener %d times", reached.Load())
	}
	sp := tier.spawn.current()
	if sp == nil {
		t.Fatal("no spawner")
	}
	if sp.spares.Load() == 0 {
		t.Fatal("no job got a spare namespace")
	}
	spares := sp.spares.Load()

	// A guarded worker gets one too.
	g := newGuarded(t, "expr")
	if res, err := g.Run(context.Background(), airlock.Job{Kind: airlock.KindExpr, Code: "1 + 1"}); err != nil || res.Value != int64(2) {
		t.Fatalf("guarded: %v %+v", err, res)
	}
	if gs := g.spawn.current(); gs == nil || gs.spares.Load() == 0 {
		t.Fatal("no guarded worker got a spare namespace")
	}

	// With egress, a namespace of its own: the stage's forwarder brings lo
	// up and listens there (TestEgress checks what it does).
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	job := cmdJob("true")
	job.Grants.Net = []airlock.NetRule{{Host: "example.test"}}
	etier := newTestTier(t, bothTiers[0], testConfig(t).WithEgress(egress.Config{}))
	if res, err := etier.Run(ctx, job); err != nil || res.ExitCode != 0 {
		t.Fatalf("egress job: %v %+v", err, res)
	}
	if es := etier.spawn.current(); es == nil || es.spares.Load() != 0 {
		t.Fatalf("a sandbox with egress got a spare namespace, or no spawner started it (%v)", es)
	}
	if sp.spares.Load() != spares {
		t.Fatal("spare count changed without jobs")
	}
}

// TestSpawnerMounts: as root the spawner's mount namespace (which every
// stage's starts as a copy of) holds only what a stage reads from before
// it pivots — /, /proc, /dev and what is under /usr, /etc and the links
// into /usr — and none of the host's other mounts.
func TestSpawnerMounts(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skipf(t, "the spawner trims its mounts only as root (it needs a mount namespace of its own)")
	}
	cfg := testConfig(t)
	tier := newTestTier(t, bothTiers[0], cfg)
	checkRuns(t, tier)
	sp := tier.spawn.current()
	if sp == nil {
		t.Fatal("no spawner")
	}
	points := func(pid string) map[string]bool {
		list, err := stage.MountPoints(pid)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, p := range list {
			out[p] = true
		}
		return out
	}
	host, mine := points("self"), points(strconv.Itoa(sp.proc.Pid))
	for _, want := range []string{"/", "/proc", "/dev"} {
		if host[want] && !mine[want] {
			t.Errorf("the spawner lacks %s", want)
		}
	}
	kept := func(p string) bool {
		if p == "/" || p == "/proc" || p == "/dev" {
			return true
		}
		for _, d := range []string{"/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"} {
			if p == d || strings.HasPrefix(p, d+"/") {
				return true
			}
		}
		return false
	}
	dropped := 0
	for p := range host {
		switch {
		case kept(p):
		case mine[p]:
			t.Errorf("the spawner still has the host's mount at %s", p)
		default:
			dropped++
		}
	}
	t.Logf("host mounts %d, the spawner's %d (%d dropped)", len(host), len(mine), dropped)
	assertClean(t, tier, cfg)
}

// TestSpawnIntoCgroup: a process started with a cgroup v2 directory is
// born in that group (clone3's CLONE_INTO_CGROUP), through the spawner
// and from this process alike: how a start on a cgroup v2 host puts its
// stage in the job's group without moving it in afterwards (see
// stage.SpawnRequest.IntoCgroup). A v1 host's hybrid mount
// (/sys/fs/cgroup/unified, no controllers) is used when there is no
// unified hierarchy at the root.
func TestSpawnIntoCgroup(t *testing.T) {
	if err := probe(); err != nil {
		tiertest.Unavailable(t, "process", err)
	}
	root := ""
	for _, p := range []string{cgroupRoot, filepath.Join(cgroupRoot, "unified")} {
		var st unix.Statfs_t
		if unix.Statfs(p, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
			root = p
			break
		}
	}
	if root == "" {
		testenv.Skipf(t, "no cgroup v2 hierarchy is mounted (neither unified nor hybrid); TestCgroupV2 runs this test in a guest that has one")
	}
	bin, err := discoverStage()
	if err != nil {
		t.Fatal(err)
	}
	name := newName(testConfig(t).baseDir) + "-test"
	path := filepath.Join(root, name)
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := rmdirRetry(path); err != nil {
			t.Errorf("removing the test's cgroup: %v", err)
		}
	})
	dir, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	var h spawners
	defer h.close()
	for _, viaSpawner := range []bool{true, false} {
		cmd := &exec.Cmd{
			Path: "/bin/sleep", Args: []string{"sleep", "30"}, Dir: "/",
			Stdin: null, Stdout: null, Stderr: null,
			SysProcAttr: &syscall.SysProcAttr{
				Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID | syscall.CLONE_NEWNS,
				UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 65534, Size: 1}},
				GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 65534, Size: 1}},
				Pdeathsig:   syscall.SIGKILL, UseCgroupFD: true, CgroupFD: int(dir.Fd()),
			},
		}
		p := newProc()
		if viaSpawner {
			err = p.startProc(&h, bin, cmd, 65534, false, dir)
		} else {
			err = p.startHere(cmd)
		}
		if err != nil {
			t.Fatalf("spawner %v: %v", viaSpawner, err)
		}
		if got := p.pidFile() != nil; got != viaSpawner {
			t.Fatalf("started through the spawner: %v, want %v", got, viaSpawner)
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", p.pid))
		p.killIfRunning()
		<-p.waitCh
		p.release()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(strings.Split(strings.TrimSpace(string(b)), "\n"), "0::/"+name) {
			t.Errorf("spawner %v: the process was not born in %s:\n%s", viaSpawner, path, b)
		}
	}
}
