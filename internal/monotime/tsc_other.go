//go:build !amd64

package monotime

func ticks() uint64 { return 0 }

func haveInvariantTSC() bool { return false }
