//go:build !linux

package pairbench

import "time"

// threadCPU is unavailable here: Run reports wall time only.
func threadCPU() time.Duration { return 0 }
