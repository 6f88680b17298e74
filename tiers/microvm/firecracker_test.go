package microvm

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/tools"
)

// fakeFirecracker serves Firecracker's API shape on a Unix socket and
// records what it was sent; it refuses what Firecracker would refuse.
type fakeFirecracker struct {
	mu      sync.Mutex
	calls   []string
	bodies  map[string]map[string]any
	started bool
}

func (f *fakeFirecracker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fault := func(msg string) {
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(map[string]string{"fault_message": msg})
	}
	if r.Method != http.MethodPut || r.Header.Get("Content-Type") != "application/json" {
		fault("want PUT with a JSON body")
		return
	}
	var body map[string]any
	data, _ := io.ReadAll(r.Body)
	dec := json.NewDecoder(strings.NewReader(string(data)))
	if err := dec.Decode(&body); err != nil {
		fault("bad JSON: " + err.Error())
		return
	}
	allowed := map[string][]string{
		"/boot-source":    {"kernel_image_path", "initrd_path", "boot_args"},
		"/machine-config": {"vcpu_count", "mem_size_mib", "smt"},
		"/vsock":          {"guest_cid", "uds_path"},
		"/actions":        {"action_type"},
	}
	fields, ok := allowed[r.URL.Path]
	if !ok {
		fault("unknown resource " + r.URL.Path)
		return
	}
	for k := range body {
		if !contains(fields, k) {
			fault("unknown field " + k)
			return
		}
	}
	if f.started {
		fault("the microVM is already running")
		return
	}
	if r.URL.Path == "/actions" {
		if body["action_type"] != "InstanceStart" {
			fault("unknown action")
			return
		}
		for _, need := range []string{"/boot-source", "/machine-config"} {
			if f.bodies[need] == nil {
				fault("InstanceStart before " + need)
				return
			}
		}
		f.started = true
	}
	if f.bodies == nil {
		f.bodies = map[string]map[string]any{}
	}
	f.calls = append(f.calls, r.Method+" "+r.URL.Path)
	f.bodies[r.URL.Path] = body
	w.WriteHeader(http.StatusNoContent)
}

func contains(s []string, x string) bool {
	for _, e := range s {
		if e == x {
			return true
		}
	}
	return false
}

func serveFake(t *testing.T, h http.Handler) string {
	sock := filepath.Join(t.TempDir(), "api.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return sock
}

func TestFirecrackerAPI(t *testing.T) {
	fake := &fakeFirecracker{}
	sock := serveFake(t, fake)
	spec := vmSpec{memMB: 352, vcpus: 2}
	reqs := fcRequests("/k/vmlinux", "/k/base.cpio", "/run/vm/v.sock", spec)
	if err := fcApply(context.Background(), sock, reqs, nil); err != nil {
		t.Fatal(err)
	}
	want := []string{"PUT /boot-source", "PUT /machine-config", "PUT /vsock", "PUT /actions"}
	if strings.Join(fake.calls, ",") != strings.Join(want, ",") {
		t.Fatalf("calls %v, want %v", fake.calls, want)
	}
	bs := fake.bodies["/boot-source"]
	if bs["kernel_image_path"] != "/k/vmlinux" || bs["initrd_path"] != "/k/base.cpio" || !strings.Contains(bs["boot_args"].(string), "rdinit=/init") {
		t.Fatalf("boot source %v", bs)
	}
	mc := fake.bodies["/machine-config"]
	if mc["vcpu_count"] != float64(2) || mc["mem_size_mib"] != float64(352) {
		t.Fatalf("machine config %v", mc)
	}
	if vs := fake.bodies["/vsock"]; vs["guest_cid"] != float64(fcGuestCID) || vs["uds_path"] != "/run/vm/v.sock" {
		t.Fatalf("vsock %v", vs)
	}
	// No network interface is ever configured.
	for _, c := range fake.calls {
		if strings.Contains(c, "network-interfaces") {
			t.Fatalf("a network interface was configured: %v", fake.calls)
		}
	}
	// A second start is refused by Firecracker, and the fault reaches us.
	err := fcApply(context.Background(), sock, reqs[3:], nil)
	if err == nil || !strings.Contains(err.Error(), "already running") {
		t.Fatalf("fault not reported: %v", err)
	}
}

// TestFirecrackerAPIWaitsForSocket checks that the first call waits for the
// API socket to appear, and gives up when the VMM exits.
func TestFirecrackerAPIWaitsForSocket(t *testing.T) {
	done := make(chan struct{})
	time.AfterFunc(50*time.Millisecond, func() { close(done) })
	err := fcApply(context.Background(), filepath.Join(t.TempDir(), "never.sock"), fcRequests("k", "i", "v", vmSpec{memMB: 1, vcpus: 1}), done)
	if err == nil || !strings.Contains(err.Error(), "exited") {
		t.Fatalf("got %v", err)
	}
}

// TestFirecrackerBoot runs a job under Firecracker where it can.
func TestFirecrackerBoot(t *testing.T) {
	fc, err := exec.LookPath("firecracker")
	switch {
	case err != nil:
		t.Skip("Firecracker needs a firecracker binary: none is on PATH, and none can be installed here (no Debian package, nothing on the Go module proxy or npm)")
	case !tools.KVMUsable():
		t.Skip("Firecracker needs /dev/kvm, which does not open here")
	case !kvmGuestsBoot():
		t.Skip("Firecracker needs KVM guests: /dev/kvm opens here, but no guest boots under it (QEMU's probe)")
	}
	tier, err := New(testConfig().WithFirecracker(fc))
	if err != nil {
		t.Fatal(err)
	}
	defer tier.Close()
	if tier.Backend() != "firecracker" {
		t.Fatalf("backend %s", tier.Backend())
	}
	res, err := tier.Run(context.Background(), command("sh", "-c", "echo hi"))
	if err != nil || res.Stdout != "hi\n" {
		t.Fatalf("%v %+v", err, res)
	}
}

// kvmGuestsBoot reports whether a guest boots under KVM here, by the
// probe the tier makes with QEMU and its kernel (true when those are
// missing: the boot then says what fails).
func kvmGuestsBoot() bool {
	qemu, err := tools.Find("qemu-system-x86_64")
	if err != nil {
		return true
	}
	kernel, err := tools.File("AIRLOCK_MICROVM_KERNEL", "microvm/vmlinux")
	if err != nil {
		return true
	}
	return tools.KVMBoots(qemu, kernel, filepath.Join(testDir, "cache"))
}
