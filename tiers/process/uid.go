package process

import (
	"errors"

	"github.com/airlock-sandbox/airlock/tiers/internal/hostids"
)

// Each sandbox runs as its own host uid (and gid), so sandboxes cannot
// signal, trace or read each other even through a shared resource, and a
// uid-wide limit (RLIMIT_NPROC) is per job (see package hostids).

type uidAllocator struct{ r hostids.Range }

func sharedUIDs(base, count uint32) *uidAllocator {
	return &uidAllocator{hostids.Range{Base: base, Count: count}}
}

func (a *uidAllocator) get() (uint32, error) {
	u, err := a.r.Take()
	if err != nil {
		return 0, errors.New("starting sandbox: no free sandbox uid")
	}
	return u, nil
}

func sharedUIDsPut(u uint32) { hostids.Put(u) }
