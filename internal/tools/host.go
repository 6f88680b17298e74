package tools

import (
	"os"
	"strconv"
	"strings"
)

// KVMUsable reports whether /dev/kvm opens, so QEMU can use hardware
// virtualisation rather than emulation.
func KVMUsable() bool {
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return false
	}
	_ = f.Close()
	return true
}

// TSCkHz is the host's TSC frequency from /proc/cpuinfo, or 0. A microVM
// guest under emulation gets it as tsc_early_khz: without it (and
// tsc=reliable, no_timer_check) the guest sometimes hangs calibrating
// against a PIT the microvm machine does not have.
func TSCkHz() int64 {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "cpu MHz" {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil && f > 0 {
				return int64(f * 1000)
			}
			return 0
		}
	}
	return 0
}
