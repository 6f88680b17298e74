package tools

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
)

// fakeQEMU writes a stand-in for QEMU that runs body.
func fakeQEMU(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "qemu")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// The probe's verdict: a guest that gives up and lets QEMU exit cleanly is
// a working KVM; a QEMU that fails, or one still running at the timeout
// (a guest that never boots), is not, and is killed and waited for.
func TestProbeKVM(t *testing.T) {
	if !probeKVM(fakeQEMU(t, "exit 0"), "/kernel") {
		t.Error("a QEMU that exited cleanly was judged not working")
	}
	if probeKVM(fakeQEMU(t, "exit 1"), "/kernel") {
		t.Error("a QEMU that failed was judged working")
	}
	mark := filepath.Join(t.TempDir(), "pid")
	start := time.Now()
	if probeKVM(fakeQEMU(t, "echo $$ > "+mark+"; exec sleep 60"), "/kernel") {
		t.Error("a QEMU still running at the timeout was judged working")
	}
	if d := time.Since(start); d > kvmProbeTimeout+2*time.Second {
		t.Errorf("the probe took %v, beyond its %v timeout", d, kvmProbeTimeout)
	}
	pid, err := os.ReadFile(mark)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/proc/" + strings.TrimSpace(string(pid))); err == nil {
		t.Errorf("the hung probe (pid %s) was left running", strings.TrimSpace(string(pid)))
	}
	if probeKVM(filepath.Join(t.TempDir(), "missing"), "/kernel") {
		t.Error("a missing QEMU was judged working")
	}
}

// KVMBoots keeps its verdict in the cache directory under a key naming
// the boot, QEMU and the kernel, and probes again when the key differs.
func TestKVMBootsCache(t *testing.T) {
	if !KVMUsable() {
		if KVMBoots(fakeQEMU(t, "exit 0"), "/kernel", t.TempDir()) {
			t.Fatal("KVM judged working without /dev/kvm")
		}
		return
	}
	dir := t.TempDir()
	qemu := fakeQEMU(t, "exit 0")
	if !KVMBoots(qemu, "/kernel", dir) {
		t.Fatal("a stand-in QEMU that exits cleanly was judged not working")
	}
	data, err := os.ReadFile(filepath.Join(dir, "kvm-probe"))
	if err != nil || !strings.HasSuffix(string(data), "\ntrue\n") || !strings.Contains(string(data), qemu) {
		t.Fatalf("cached verdict %q, %v", data, err)
	}
	// A verdict recorded for another boot is not trusted.
	other := fakeQEMU(t, "exit 1")
	stale := strings.Replace(probeKey(other, "/kernel"), " ", "-old ", 1) + "\ntrue\n"
	if err := os.WriteFile(filepath.Join(dir, "kvm-probe"), []byte(stale), 0o600); err != nil {
		t.Fatal(err)
	}
	if KVMBoots(other, "/kernel", dir) {
		t.Fatal("a stale cached verdict was used")
	}
	// A matching one is used without probing (this QEMU would fail).
	failing := fakeQEMU(t, "exit 1")
	if err := os.WriteFile(filepath.Join(dir, "kvm-probe"), []byte(probeKey(failing, "/k")+"\ntrue\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if !KVMBoots(failing, "/k", dir) {
		t.Fatal("a matching cached verdict was not used")
	}
	// Not from a directory another user made: they could plant it.
	theirs := testenv.ForeignDir(t)
	planted := fakeQEMU(t, "exit 1")
	if err := os.WriteFile(filepath.Join(theirs, "kvm-probe"), []byte(probeKey(planted, "/k")+"\ntrue\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if KVMBoots(planted, "/k", theirs) {
		t.Fatal("a verdict planted in another user's directory was used")
	}
}
