package stage

import (
	"embed"
	"hash/fnv"
	"io/fs"
	"os"
	"runtime"
	"sort"
	"strconv"
	"sync"

	"github.com/airlock-sandbox/airlock/internal/place"
	"github.com/airlock-sandbox/airlock/role"
	"github.com/airlock-sandbox/airlock/tiers/internal/execguard"
	"github.com/airlock-sandbox/airlock/tiers/process/internal/wire"
)

// Digest is the stage mode in which the binary prints its Digest and
// exits: how the process package checks that a separate stage binary
// speaks this binary's protocol before it uses one.
const Digest = "process-digest"

// sources is this package's own code, which both sides of the protocol
// share (with the wire package's, hashed too, and the placement code's
// the stage writes job files with, and the role dispatcher's, which names
// the stage in the environment): a stage binary built from other
// sources (an older checkout, a newer one) has another digest.
//
//go:embed *.go
var sources embed.FS

// CodeDigest identifies the stage code a binary carries: a hash of this
// package's sources and the Go release that built it. It is a version
// check, not an integrity check: the stage binary's trust comes from where
// it is found and who may write it (see the process package).
var CodeDigest = sync.OnceValue(func() string {
	h := fnv.New64a()
	for _, src := range []embed.FS{sources, wire.Sources, place.Sources, role.Sources, execguard.Sources} {
		names, _ := fs.Glob(src, "*.go")
		sort.Strings(names)
		for _, n := range names {
			b, _ := src.ReadFile(n)
			h.Write([]byte(n))
			h.Write([]byte{0})
			h.Write([]byte(strconv.Itoa(len(b))))
			h.Write([]byte{0})
			h.Write(b)
		}
	}
	h.Write([]byte(runtime.Version()))
	return strconv.FormatUint(h.Sum64(), 16)
})

// printDigest is the Digest mode.
func printDigest() int {
	if _, err := os.Stdout.WriteString(CodeDigest() + "\n"); err != nil {
		return 1
	}
	return 0
}
