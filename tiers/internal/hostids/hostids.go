// Package hostids hands out the host uids (each also a gid) that
// sandboxes and VMMs run as, so that no two of them share one: one
// sandbox could otherwise signal, trace or read another's processes and
// files, and a uid-wide limit (RLIMIT_NPROC) would be shared. The ids are
// held across every tier of the process; each is drawn at random from
// its range, which keeps other processes' draws from meeting it often.
package hostids

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"sync"
)

// Range is Count host ids from Base.
type Range struct{ Base, Count uint32 }

// ErrNone is returned when no id of a range is free.
var ErrNone = errors.New("no free host uid")

var (
	mu    sync.Mutex
	inUse = map[uint32]bool{}
)

// Take reserves an id of r that no other holder in this process has,
// until Put.
func (r Range) Take() (uint32, error) {
	mu.Lock()
	defer mu.Unlock()
	if r.Count == 0 {
		return 0, ErrNone
	}
	for range 1000 {
		var b [4]byte
		_, _ = rand.Read(b[:])
		u := r.Base + binary.LittleEndian.Uint32(b[:])%r.Count
		if !inUse[u] {
			inUse[u] = true
			return u, nil
		}
	}
	return 0, ErrNone
}

// Put frees u.
func Put(u uint32) {
	mu.Lock()
	delete(inUse, u)
	mu.Unlock()
}

// Held reports whether u is reserved.
func Held(u uint32) bool {
	mu.Lock()
	defer mu.Unlock()
	return inUse[u]
}
