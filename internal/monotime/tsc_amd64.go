package monotime

// ticks reads the time-stamp counter.
func ticks() uint64

// cpuid executes CPUID for a leaf (subleaf 0).
func cpuid(leaf uint32) (eax, ebx, ecx, edx uint32)

// haveInvariantTSC reports whether the counter runs at a constant rate in
// every power state (CPUID 0x80000007, EDX bit 8), the condition for
// using it as a clock at all; calibration checks the rest.
func haveInvariantTSC() bool {
	if max, _, _, _ := cpuid(0x80000000); max < 0x80000007 {
		return false
	}
	_, _, _, edx := cpuid(0x80000007)
	return edx&(1<<8) != 0
}
