package tierset

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock"
)

// Lazy returns the set's tiers unbuilt: each is built the first time a job
// needs it, so that a command pays only for the tier it uses (an
// expression never starts gVisor's state sweep). Settings that do not
// validate are an error, as for Build. A server, whose pools must fill
// before jobs arrive, builds with Build instead.
func Lazy(o Options) ([]airlock.Tier, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	return LazyFrom(Entries(), o), nil
}

// LazyFrom returns the given entries' tiers unbuilt (see Lazy).
//
// Such a tier answers Name, Level and Cost from its entry, and Available
// from the entry's probe, which is cheap and asked once. The router asks
// Admit only of the tiers it considers for a job, cheapest first, and runs
// the first that admits; Admit builds the tier and asks the built one, so
// its answer is the built tier's whatever the job (a tier's admission may
// depend on what its build found: its image store, its egress). The build
// happens once, also for concurrent callers; one that fails leaves the
// stand-in Build would have (it admits nothing and says why). Close closes
// only what was built, and nothing is built after it.
func LazyFrom(entries []Entry, o Options) []airlock.Tier {
	out := make([]airlock.Tier, 0, len(entries))
	for _, e := range entries {
		l := &lazy{e: e, o: o}
		if e.Sessions {
			out = append(out, &lazySessions{l})
		} else {
			out = append(out, l)
		}
	}
	return out
}

// Built reports whether t, a tier from Lazy, has been built (a tier from
// Build always has).
func Built(t airlock.Tier) bool {
	switch l := t.(type) {
	case *lazy:
		return l.built.Load() != nil
	case *lazySessions:
		return l.built.Load() != nil
	}
	return true
}

type lazy struct {
	e Entry
	o Options

	probeOnce sync.Once
	probeErr  error

	built  atomic.Pointer[builtTier] // set once the tier is built
	mu     sync.Mutex                // held while building
	closed bool
}

type builtTier struct{ t airlock.Tier }

var (
	_ airlock.Tier        = (*lazy)(nil)
	_ airlock.Prober      = (*lazy)(nil)
	_ airlock.SessionTier = (*lazySessions)(nil)
)

func (l *lazy) Name() string         { return l.e.Name }
func (l *lazy) Level() airlock.Level { return l.e.Level }

// Cost is the entry's declared start-up cost, which the built tier
// declares too (the router orders tiers by it).
func (l *lazy) Cost() time.Duration { return l.e.Cost }

// Available is the built tier's answer once it is built, and the entry's
// probe before.
func (l *lazy) Available() error {
	if b := l.built.Load(); b != nil {
		if p, ok := b.t.(airlock.Prober); ok {
			return p.Available()
		}
		return nil
	}
	l.probeOnce.Do(func() {
		if l.e.Probe != nil {
			l.probeErr = l.e.Probe(l.o)
		}
	})
	return l.probeErr
}

// tier returns the built tier, building it first if need be.
func (l *lazy) tier() airlock.Tier {
	if b := l.built.Load(); b != nil {
		return b.t
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if b := l.built.Load(); b != nil {
		return b.t
	}
	if l.closed {
		return &broken{name: l.e.Name, level: l.e.Level, err: errClosed}
	}
	t, err := l.e.New(l.o)
	if err != nil {
		t = &broken{name: l.e.Name, level: l.e.Level, err: fmt.Errorf("building tier %s: %w", l.e.Name, err)}
	}
	l.built.Store(&builtTier{t})
	return t
}

var errClosed = errors.New("the tier set is closed")

// Admit is the built tier's verdict; a tier the probe found unavailable is
// refused as the router refuses one, without building it.
func (l *lazy) Admit(job airlock.Job) error {
	if l.built.Load() == nil {
		if err := l.Available(); err != nil {
			return &airlock.NotAdmitted{Tier: l.e.Name, Reason: "unavailable: " + err.Error()}
		}
	}
	t := l.tier()
	if p, ok := t.(airlock.Prober); ok {
		// What the build found missing is a refusal too.
		if err := p.Available(); err != nil {
			return &airlock.NotAdmitted{Tier: l.e.Name, Reason: "unavailable: " + err.Error()}
		}
	}
	return t.Admit(job)
}

// Run builds the tier if need be and runs the job on it.
func (l *lazy) Run(ctx context.Context, job airlock.Job) (airlock.Result, error) {
	return l.tier().Run(ctx, job)
}

// Attach builds the tier if need be and attaches the job on it; a tier
// that cannot attach refuses it as not admitted.
func (l *lazy) Attach(ctx context.Context, job airlock.Job) (airlock.Attached, error) {
	t := l.tier()
	at, ok := t.(airlock.Attacher)
	if !ok {
		if err := t.Admit(job); err != nil {
			return nil, err
		}
		return nil, &airlock.NotAdmitted{Tier: l.e.Name, Reason: "cannot run a job attached"}
	}
	return at.Attach(ctx, job)
}

// Close closes the tier if it was built, and keeps it from being built
// later.
func (l *lazy) Close() error {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	if b := l.built.Load(); b != nil {
		if c, ok := b.t.(io.Closer); ok {
			return c.Close()
		}
	}
	return nil
}

// lazySessions is a lazy tier whose built tier keeps sessions
// (Entry.Sessions), so that callers asserting airlock.SessionTier see the
// same interfaces as on the built tier.
type lazySessions struct{ *lazy }

// OpenSession builds the tier if need be and opens a session on it.
func (l *lazySessions) OpenSession(ctx context.Context, opts airlock.SessionOptions) (airlock.Session, error) {
	t := l.tier()
	st, ok := t.(airlock.SessionTier)
	if !ok {
		// The stand-in for a tier that could not be built.
		return nil, t.Admit(airlock.Job{})
	}
	return st.OpenSession(ctx, opts)
}
