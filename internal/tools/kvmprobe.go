package tools

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/statedir"
)

// kvmProbeTimeout bounds the probe boot. A guest under working KVM boots
// the kernel to its give-up panic in a few hundred milliseconds.
const kvmProbeTimeout = 3 * time.Second

var kvmVerdicts struct {
	sync.Mutex
	m map[string]bool
}

// KVMBoots reports whether QEMU can boot kernel under KVM here. /dev/kvm
// opening is not enough: under some nested hypervisors KVM runs a few
// real-mode instructions but a Linux guest's vCPU never gets through the
// boot (seen on a Firecracker guest: QEMU spins in the host kernel and the
// guest prints nothing, not even an early console line). So the probe
// boots kernel with no root under -accel kvm, and KVM counts as working
// when the kernel reaches its give-up panic and QEMU exits (-no-reboot)
// within a few seconds. The verdict is kept for the process and, when
// cacheDir is set, in a file there keyed by the boot, QEMU and the kernel,
// so that a machine pays the probe once per boot.
func KVMBoots(qemu, kernel, cacheDir string) bool {
	if !KVMUsable() {
		return false
	}
	key := probeKey(qemu, kernel)
	kvmVerdicts.Lock()
	defer kvmVerdicts.Unlock()
	if v, ok := kvmVerdicts.m[key]; ok {
		return v
	}
	file := ""
	// A verdict is read from, and kept in, only a directory nobody else
	// could have written it into.
	if cacheDir != "" && statedir.Usable(cacheDir, 0o700) {
		file = filepath.Join(cacheDir, "kvm-probe")
		if data, err := os.ReadFile(file); err == nil {
			if k, v, ok := strings.Cut(strings.TrimSpace(string(data)), "\n"); ok && k == key && (v == "true" || v == "false") {
				return remember(key, v == "true")
			}
		}
	}
	ok := probeKVM(qemu, kernel)
	if file != "" {
		_ = os.WriteFile(file, []byte(fmt.Sprintf("%s\n%v\n", key, ok)), 0o600)
	}
	return remember(key, ok)
}

func remember(key string, v bool) bool {
	if kvmVerdicts.m == nil {
		kvmVerdicts.m = map[string]bool{}
	}
	kvmVerdicts.m[key] = v
	return v
}

// probeKey names this boot of the machine and the exact QEMU and kernel.
func probeKey(qemu, kernel string) string {
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	key := strings.TrimSpace(string(boot))
	for _, p := range []string{qemu, kernel} {
		st, err := os.Stat(p)
		if err != nil {
			key += " " + p + ":missing"
			continue
		}
		key += fmt.Sprintf(" %s:%d:%d", p, st.Size(), st.ModTime().UnixNano())
	}
	return key
}

// probeKVM boots kernel under KVM with no root and reports whether the
// guest gave up (and QEMU exited cleanly) in time. The probe's QEMU is
// always killed and waited for.
func probeKVM(qemu, kernel string) bool {
	cmd := exec.Command(qemu, "-M", "microvm,x-option-roms=off,rtc=on", "-accel", "kvm", "-cpu", "host",
		"-m", "128", "-smp", "1", "-nodefaults", "-no-user-config", "-display", "none", "-nic", "none",
		"-no-reboot", "-serial", "null", "-kernel", kernel,
		"-append", "console=ttyS0 quiet loglevel=1 panic=-1 pci=off cryptomgr.notests")
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		return false
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err == nil
	case <-time.After(kvmProbeTimeout):
		_ = cmd.Process.Kill()
		<-done
		return false
	}
}
