package contract

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
	"github.com/airlock-sandbox/airlock/internal/testing/tiertest"
	"github.com/airlock-sandbox/airlock/tiers/gvisor"
	"github.com/airlock-sandbox/airlock/tiers/microvm"
	"github.com/airlock-sandbox/airlock/tiers/process"
)

// osTier is one of the tiers the contract binds, built as the product
// builds it (internal/tierset): default limits, the operator's image
// store.
type osTier struct {
	name string
	open func(store *image.Store) (closingTier, error)
	// of is the tier this one is a way of running (gvisor-pooled: gvisor),
	// whose gaps and differences it shares; "" for the tier itself.
	of string
}

// tier is the name of the tier ot runs, which the cases' gaps and
// differences name.
func (ot osTier) tier() string {
	if ot.of != "" {
		return ot.of
	}
	return ot.name
}

// closingTier is a tier the suite closes when it is done.
type closingTier interface {
	airlock.Tier
	Close() error
}

var osTiers = []osTier{
	{process.NameContainer, func(store *image.Store) (closingTier, error) {
		return process.New(process.NewConfig().
			WithBaseDir(filepath.Join(testDir, "process-base")).
			WithWorkspaceDir(filepath.Join(testDir, "process-ws")).
			WithImages(store))
	}, ""},
	{gvisor.Name, func(store *image.Store) (closingTier, error) {
		return gvisor.New(gvisor.NewConfig().WithDir(filepath.Join(testDir, "gvisor")).WithImages(store))
	}, ""},
	// gVisor's warm path: a pooled sandbox started with its agent, which
	// then runs the job (as a session's runs and jobs with egress, a
	// scratch size, collect or a copy grant are), beside the cold path
	// above, where runsc runs the program itself.
	{"gvisor-pooled", func(store *image.Store) (closingTier, error) {
		return gvisor.New(gvisor.NewConfig().WithDir(filepath.Join(testDir, "gvisor-pooled")).WithImages(store).WithPool(1, 1))
	}, gvisor.Name},
	{microvm.Name, func(store *image.Store) (closingTier, error) {
		agent, err := guestAgent()
		if err != nil {
			return nil, err
		}
		// A snapshot of the default image's VM serves every case on it:
		// under emulation a boot per case would take minutes.
		return microvm.New(microvm.DefaultConfig().WithAgent(agent).
			WithCacheDir(filepath.Join(testDir, "microvm-cache")).
			WithStateDir(filepath.Join(testDir, "microvm-state")).
			WithWarm(microvm.WarmSnapshot).
			WithImages(store))
	}, ""},
}

// The tiers and the store are opened once per test binary and closed by
// TestMain: a gVisor sandbox or a microVM snapshot made for one case
// serves the next.
var (
	openMu    sync.Mutex
	openStore *image.Store
	opened    = map[string]closingTier{}
)

// store opens the operator's image store (image.DefaultDir, or
// $AIRLOCK_IMAGES) with the catalogue's minimal image as the default; it
// skips (fails under CI) when there is none.
func store(t *testing.T) *image.Store {
	t.Helper()
	openMu.Lock()
	defer openMu.Unlock()
	dir := image.DefaultDir()
	if openStore == nil {
		if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
			testenv.Skipf(t, "no image store at %s (build the catalogue: airlock image build minimal python)", dir)
		}
		s, err := image.Open(dir, image.Options{Default: "minimal", AllowHost: true})
		if err != nil {
			t.Fatal(err)
		}
		openStore = s
	}
	return openStore
}

// needImage skips the test (fails under CI) unless the store holds the
// catalogue image name.
func needImage(t *testing.T, s *image.Store, name string) {
	t.Helper()
	infos, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(infos, func(i image.Info) bool { return slices.Contains(i.Names, name) }) {
		testenv.Skipf(t, "the image store at %s has no %q image (build it: airlock image build %s)", s.Dir(), name, name)
	}
}

// tier returns the named tier, opened once; a tier whose backend is
// missing skips (or fails under CI) through tiertest.Unavailable.
func tier(t *testing.T, ot osTier, s *image.Store) airlock.Tier {
	t.Helper()
	openMu.Lock()
	defer openMu.Unlock()
	if tr := opened[ot.name]; tr != nil {
		return tr
	}
	tr, err := ot.open(s)
	if err != nil {
		t.Fatalf("building %s: %v", ot.name, err)
	}
	if p, ok := tr.(airlock.Prober); ok {
		if err := p.Available(); err != nil {
			tr.Close()
			tiertest.Unavailable(t, ot.name, err)
		}
	}
	opened[ot.name] = tr
	return tr
}

// closeTiers closes every tier opened.
func closeTiers() {
	openMu.Lock()
	defer openMu.Unlock()
	for name, tr := range opened {
		tr.Close()
		delete(opened, name)
	}
}

// run runs job on tr, bounded well beyond the job's own wall clock.
func run(tr airlock.Tier, job airlock.Job) (airlock.Result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	return tr.Run(ctx, job)
}

// runResult is what one run gave.
type runResult struct {
	res airlock.Result
	err error
}

// runInSession runs jobs in turn in one session of tr, opened for them
// and closed after. A tier that keeps no sessions must refuse a job that
// asks for one (not admitted), rather than run it without: that is
// checked instead, and ok is false.
func runInSession(t *testing.T, tr airlock.Tier, jobs ...airlock.Job) (_ []runResult, ok bool) {
	t.Helper()
	st, ok := tr.(airlock.SessionTier)
	if !ok {
		job := jobs[0]
		job.Lifecycle = airlock.LifecycleSession
		if err := tr.Admit(job); airlock.KindOf(err) != airlock.ErrNotAdmitted {
			t.Errorf("%s keeps no sessions, but admits a job of lifecycle session: %v", tr.Name(), err)
		}
		return nil, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	sess, err := st.OpenSession(ctx, airlock.SessionOptions{})
	if err != nil {
		t.Fatalf("opening a session: %v", err)
	}
	defer func() {
		if err := sess.Close(); err != nil {
			t.Errorf("closing the session: %v", err)
		}
	}()
	var out []runResult
	for _, job := range jobs {
		res, err := sess.Run(ctx, job)
		out = append(out, runResult{res, err})
	}
	return out, true
}
