package bench

import (
	"bufio"
	"os"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/tools"
)

// Machine describes where a report was measured.
type Machine struct {
	CPU    string `json:"cpu_model"`
	Cores  int    `json:"cores"`
	Kernel string `json:"kernel"`
	OS     string `json:"os"`
	Arch   string `json:"arch"`
	Go     string `json:"go_version"`
	// KVM: a guest boots under KVM here (where QEMU and the guest kernel
	// are missing: /dev/kvm opens). Otherwise the microVM tier and the
	// qemu-boot baseline emulate the CPU (TCG), as their rows say.
	KVM     bool    `json:"kvm"`
	Load1   float64 `json:"load1"`
	MemoryB uint64  `json:"memory_bytes,omitempty"`
}

func machine() Machine {
	m := Machine{Cores: runtime.NumCPU(), OS: runtime.GOOS, Arch: runtime.GOARCH, Go: runtime.Version(), KVM: kvmBoots()}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		m.Kernel = unix.ByteSliceToString(u.Sysname[:]) + " " + unix.ByteSliceToString(u.Release[:])
	}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
		_ = f.Close()
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			m.Load1, _ = strconv.ParseFloat(f[0], 64)
		}
	}
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		m.MemoryB = uint64(si.Totalram) * uint64(si.Unit)
	}
	return m
}

// kvmBoots reports whether a guest boots under KVM here, as the microVM
// tier decides it: /dev/kvm may open where nested virtualisation still
// fails.
func kvmBoots() bool {
	if !tools.KVMUsable() {
		return false
	}
	qemu, kernel, err := guestTools()
	if err != nil {
		return true
	}
	return tools.KVMBoots(qemu, kernel, "")
}

// kvmWords is the header's account of KVM.
func (m Machine) kvmWords() string {
	if m.KVM {
		return "KVM"
	}
	return "no KVM (guests emulated: TCG)"
}
