package process

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"sync"
)

// Each sandbox runs as its own host uid (and gid), so sandboxes cannot
// signal, trace or read each other even through a shared resource, and a
// uid-wide limit (RLIMIT_NPROC) is per job.

type uidAllocator struct {
	base, count uint32
}

var (
	uidMu    sync.Mutex
	uidInUse = map[uint32]bool{}
)

func sharedUIDs(base, count uint32) *uidAllocator { return &uidAllocator{base: base, count: count} }

func (a *uidAllocator) get() (uint32, error) {
	uidMu.Lock()
	defer uidMu.Unlock()
	if uint64(len(uidInUse)) >= uint64(a.count) {
		return 0, errors.New("starting sandbox: no free sandbox uid")
	}
	for range 1000 {
		var b [4]byte
		_, _ = rand.Read(b[:])
		u := a.base + binary.LittleEndian.Uint32(b[:])%a.count
		if !uidInUse[u] {
			uidInUse[u] = true
			return u, nil
		}
	}
	return 0, errors.New("starting sandbox: no free sandbox uid")
}

func sharedUIDsPut(u uint32) {
	uidMu.Lock()
	delete(uidInUse, u)
	uidMu.Unlock()
}
