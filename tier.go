package airlock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"time"
)

// Tier runs jobs behind one isolation boundary. Every tier passes the
// conformance suite in internal/testing/tiertest.
//
// Admit reports, without running anything, whether the tier can enforce
// everything the job needs; it returns a [*NotAdmitted] saying which part it
// cannot. Run prepares the job (see [Prepare]), runs it and returns a Result
// filled as far as the run got, together with a typed error when the run was
// stopped or failed. A program that exits non-zero is not an error: its exit
// code is in the Result. Run must be safe for concurrent use.
//
// A tier may declare its typical start-up cost with a method
// Cost() time.Duration; the router (package escalate) tries tiers cheapest
// first, and places a tier that declares none by its level.
//
// A tier whose Run does the tier's own admission first may say so with a
// method AdmitsInRun() that does nothing: a job that Admit refuses gets the
// same [*NotAdmitted] from Run before any of it runs, and Run returns
// *NotAdmitted for nothing else. The router then runs it without calling
// Admit first (a call through the interface that copies the Job), and when
// Run refuses a job Admit refuses too it moves on to the next tier as it
// would after Admit; a job Run refuses and Admit accepts is refused, not
// run on another tier than Route and Explain name. Route and Explain still
// call Admit.
type Tier interface {
	Name() string
	Level() Level
	Admit(job Job) error
	Run(ctx context.Context, job Job) (Result, error)
}

// Prober is implemented by tiers whose backend may be missing (a runsc
// binary, QEMU, a kernel feature). Available returns nil when the tier can
// run jobs here, or an error saying what is missing.
type Prober interface {
	Available() error
}

// SessionTier is implemented by tiers that keep state across runs.
type SessionTier interface {
	Tier
	OpenSession(ctx context.Context, opts SessionOptions) (Session, error)
}

// SessionOptions configure a session.
type SessionOptions struct {
	// ID names the session; empty picks a random one.
	ID string
	// TTL closes the session after it has been idle this long (0: never).
	TTL time.Duration
	// Workspace, when set, names a persistent workspace that is reattached
	// rather than created: what the session leaves there accumulates.
	Workspace string
	// Account, on the account tier, names the account whose executor
	// keeps the session (empty: the tier's default account).
	Account string
}

// Resolve checks the options a tier cannot act on (a negative TTL) and
// fills an empty ID with a random one. Every session tier calls it first.
func (o SessionOptions) Resolve() (SessionOptions, error) {
	if o.TTL < 0 {
		return o, invalid("ttl", "must not be negative")
	}
	if o.ID == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		o.ID = hex.EncodeToString(b[:])
	}
	return o, nil
}

// Session is one instance kept across runs. Its Run behaves like the tier's,
// except that state (globals, files in the scratch) survives between runs.
type Session interface {
	ID() string
	Run(ctx context.Context, job Job) (Result, error)
	Close() error
}

// PoolStats are a warm pool's counters.
type PoolStats struct {
	Size   int    // configured number of ready instances
	Ready  int    // instances ready now
	Hits   uint64 // jobs that claimed a ready instance
	Misses uint64 // jobs that found the pool empty and started cold
	// Failed counts starts of pool instances that failed, and LastError
	// is the last one's reason ("" once a start succeeds): a pool that
	// cannot fill (its image's name removed, a backend gone) says why
	// rather than leave every job to start cold in silence.
	Failed    uint64
	LastError string

	// Images breaks the counters down per image, keyed by the image's
	// digest ("host" for the host view without an image store), for a
	// tier that keeps pools of several images; the fields above are
	// their totals. Nil for a pool that is not per image (the guarded
	// interpreters' workers).
	Images map[string]PoolStats
	// Names are, in an entry of Images, what the image's pool was
	// configured by: catalogue names or references, the default image by
	// the name it resolved from. A name moved to another image moves its
	// pool with it. Nil in the totals.
	Names []string
}

// Pooler is implemented by tiers that keep warm capacity: a pool of
// started, unused sandboxes or VMs. PoolStats returns its counters, for
// servers and benchmarks to export; a tier without a pool returns the zero
// PoolStats. WaitWarm blocks until that capacity is full (or ctx ends), so
// a caller can measure what a claim costs when the pool is ready rather
// than how fast it refills; a tier configured without a pool returns nil
// at once.
type Pooler interface {
	PoolStats() PoolStats
	WaitWarm(ctx context.Context) error
}
