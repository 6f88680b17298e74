package microvm

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/internal/egresswire"
	"github.com/airlock-sandbox/airlock/internal/testing/egresstest"
	"github.com/airlock-sandbox/airlock/internal/testing/tiertest"
	"github.com/airlock-sandbox/airlock/role"
)

// TestEgress boots one VM for a job granted GET on origin.test (pinned by
// the gateway to a loopback origin) and probes from inside with busybox
// wget (the guest has no curl) and, for the PUT busybox wget cannot send,
// nc: GET through the proxy reaches the origin; PUT to
// the same name, another name, and an IP literal are refused by the
// gateway with 403 and each refusal is in Result.Decision; nothing is
// reached without the proxy (not the host through slirp's 10.0.2.2, not a
// public address: there is no default route), DNS answers nothing; the
// proxy and trust variables and the CA are in place.
func TestEgress(t *testing.T) {
	o := egresstest.StartOrigin(t, "origin.test", "other.test")
	var rec egresstest.Recorder
	tier, err := New(testConfig().WithEgress(egress.Config{Hosts: o.Pins, Log: rec.Add}))
	if err != nil {
		t.Fatal(err)
	}
	defer tier.Close()
	if err := tier.Available(); err != nil {
		tiertest.Unavailable(t, Name, err)
	}
	url := "http://origin.test:" + o.Port + "/ok"
	script := strings.Join([]string{
		"timeout 10 wget -q -O - " + url + "; echo get=$?",
		// busybox wget sends only GET (it drops --post-data behind a
		// proxy): the PUT is written to the proxy by hand.
		"printf 'PUT " + url + " HTTP/1.1\\r\\nHost: origin.test:" + o.Port + "\\r\\nContent-Length: 1\\r\\nConnection: close\\r\\n\\r\\nx' | timeout 10 nc 10.0.2.100 3128 | head -n 1",
		"timeout 10 wget -q -O /dev/null http://other.test:" + o.Port + "/; echo other=$?",
		"timeout 10 wget -q -O /dev/null http://10.0.2.2:" + o.Port + "/; echo ip=$?",
		"timeout 3 wget -q -Y off -O /dev/null http://10.0.2.2:" + o.Port + "/; echo direct-host=$?",
		"timeout 3 wget -q -Y off -O /dev/null http://1.1.1.1/; echo direct-public=$?",
		"timeout 5 nslookup evil.test 10.0.2.3 >/dev/null 2>&1; echo nslookup=$?",
		"grep -c 'BEGIN CERTIFICATE' \"$SSL_CERT_FILE\"",
		"echo proxy=$http_proxy",
		"ls /sys/class/net | wc -l",
	}, "\n")
	job := egresstest.ShellJob(script, o.Rule("origin.test"))
	job.Grants.Spawn = true
	res, err := tier.Run(context.Background(), job)
	if err != nil {
		t.Fatalf("%v\nstdout:\n%s\nstderr:\n%s", err, res.Stdout, res.Stderr)
	}
	for _, want := range []string{"origin says hello\nget=0\nHTTP/1.1 403 Forbidden\r\n", "other=1\n", "ip=1\n",
		"\n1\nproxy=http://" + guestProxy + "\n2\n"} {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("stdout lacks %q:\n%s\nstderr:\n%s", want, res.Stdout, res.Stderr)
		}
	}
	// Without the proxy nothing answers: wget fails or times out.
	for _, bad := range []string{"direct-host=0\n", "direct-public=0\n", "nslookup=0\n", "Segmentation fault"} {
		if strings.Contains(res.Stdout+res.Stderr, bad) {
			t.Errorf("output has %q:\n%s\nstderr:\n%s", bad, res.Stdout, res.Stderr)
		}
	}
	if n := strings.Count(res.Stderr, "403 Forbidden"); n != 2 {
		t.Errorf("%d refusals by the gateway in wget's stderr, want 2:\n%s", n, res.Stderr)
	}
	if o.Hits("GET") != 1 || o.Hits("PUT") != 0 {
		t.Errorf("origin saw GET %d (want 1), PUT %d (want 0)", o.Hits("GET"), o.Hits("PUT"))
	}
	joined := strings.Join(res.Decision, "\n")
	for _, want := range []string{"egress allow http GET origin.test:" + o.Port + "/ok",
		"egress deny http PUT origin.test:" + o.Port + "/ok", "egress deny http GET other.test:" + o.Port + "/",
		"egress deny http GET 10.0.2.2"} {
		if !strings.Contains(joined, want) {
			t.Errorf("decisions lack %q:\n%s", want, joined)
		}
	}
	if !rec.Has("http", "other.test", egress.Deny) {
		t.Error("the operator's log did not receive the refusal")
	}
	assertNoVMs(t, tier)
	if n := forwarders(testDir); n != 0 {
		t.Errorf("%d guestfwd forwarder processes left behind", n)
	}
}

// forwarders counts live forwarder processes serving sockets under dir.
func forwarders(dir string) int {
	n := 0
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && bytes.Contains(b, []byte(forwardArg)) && bytes.Contains(b, []byte(dir)) {
			n++
		}
	}
	return n
}

// BenchmarkEgress measures, alternately so both see the same load, a cold
// VM running /bin/true without a grant (-nic none) and a cold VM granted
// GET on a loopback origin fetching it once through the proxy (network
// device, gateway, CA, one guestfwd connection). Medians in ms and their
// ratio; run with -benchtime=Nx.
func BenchmarkEgress(b *testing.B) {
	o := egresstest.StartOrigin(b, "origin.test")
	tier := benchTier(b, testConfig().WithEgress(egress.Config{Hosts: o.Pins}))
	ctx := context.Background()
	plain := command("/bin/true")
	get := egresstest.ShellJob("wget -q -O /dev/null http://origin.test:"+o.Port+"/", o.Rule("origin.test"))
	var cold, net []time.Duration
	for b.Loop() {
		start := time.Now()
		benchRun(b, tier, ctx, plain)
		cold = append(cold, time.Since(start))
		start = time.Now()
		benchRun(b, tier, ctx, get)
		net = append(net, time.Since(start))
	}
	reportPair(b, "cold", cold, "net-get", net)
}

// TestQEMUArgsNet: only a net-granted VM gets a network device, on a
// restricted user network whose one guestfwd starts the forwarder (path
// quoted for glib's shell parser, commas doubled for QEMU's option
// parser); it loads the net drivers and runs under the sandbox options
// that let libslirp start the forwarder. Without a grant: -nic none and
// the full sandbox.
func TestQEMUArgsNet(t *testing.T) {
	tier := &Tier{cfg: DefaultConfig(), assets: &assets{qemu: "qemu", kernel: "vmlinux", initrd: "base.cpio"}, forwarder: "/opt/my tools/air,lock"}
	plain := strings.Join(tier.qemuArgs("id", "/state/vm", vmSpec{memMB: 160, vcpus: 1}), "\x00")
	withNet := strings.Join(tier.qemuArgs("id", "/state/vm", vmSpec{memMB: 160, vcpus: 1, net: true}), "\x00") + "\x00"
	for _, want := range []string{"\x00-nic\x00none\x00", "\x00-sandbox\x00" + qemuSandbox} {
		if !strings.Contains(plain, want) {
			t.Errorf("without a grant, args lack %q: %q", want, plain)
		}
	}
	if strings.Contains(plain, "netdev") || strings.Contains(plain, "virtio_net") {
		t.Errorf("a VM without a grant has a network: %q", plain)
	}
	fwd := "\x00-netdev\x00user,id=n0,restrict=on,guestfwd=tcp:10.0.2.100:3128-cmd:'/opt/my tools/air,,lock' " +
		forwardArg + " '/state/vm/egress.sock'\x00-device\x00virtio-net-device,netdev=n0\x00"
	for _, want := range []string{fwd, "," + netModules, "\x00-sandbox\x00" + qemuSandboxNet + "\x00"} {
		if !strings.Contains(withNet, want) {
			t.Errorf("with a grant, args lack %q: %q", want, withNet)
		}
	}
	if strings.Contains(withNet, "-nic\x00none") || strings.Count(withNet, "guestfwd=") != 1 || strings.Contains(qemuSandboxNet, "spawn=deny") {
		t.Errorf("with a grant: %q", withNet)
	}
}

// TestForwarderSlots: a VM holds at most maxForwarders guestfwd
// forwarders at once (QEMU starts one per guest connection); one started
// past them ends at once, before reaching the gateway, and a slot freed
// serves the next.
func TestForwarderSlots(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, egresswire.Socket) // no gateway listens
	var held []func()
	for range maxForwarders {
		release, ok := forwarderSlot(dir)
		if !ok {
			t.Fatalf("slot %d of %d not free", len(held), maxForwarders)
		}
		held = append(held, release)
	}
	defer func() {
		for _, r := range held {
			r()
		}
	}()
	forward := func() string {
		t.Helper()
		cmd := exec.Command(os.Args[0], forwardArg, sock)
		cmd.Env = append(os.Environ(), role.Env+"="+forwardRole)
		cmd.Dir = dir // QEMU's working directory holds the slots
		cmd.Stdin = strings.NewReader("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Fatalf("the forwarder succeeded with no gateway: %s", out)
		}
		return string(out)
	}
	if out := forward(); !strings.Contains(out, "the most it may") {
		t.Errorf("a forwarder past the bound: %s", out)
	}
	held[0]()
	held = held[1:]
	if out := forward(); strings.Contains(out, "the most it may") || !strings.Contains(out, "gateway") {
		t.Errorf("a forwarder with a slot freed: %s", out)
	}
}
