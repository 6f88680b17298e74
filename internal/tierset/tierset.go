// Package tierset builds the tiers the airlock command offers, from the
// operator's settings (configuration file and flags). It is the command's
// wiring: a library user builds the tiers it wants and hands them to
// escalate.New or server.New. The list is explicit; the router orders the
// tiers by the cost each declares, not by their place in it.
package tierset

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/interp/expr"
	"github.com/airlock-sandbox/airlock/interp/starlark"
	"github.com/airlock-sandbox/airlock/tiers/account"
	"github.com/airlock-sandbox/airlock/tiers/gvisor"
	"github.com/airlock-sandbox/airlock/tiers/microvm"
	"github.com/airlock-sandbox/airlock/tiers/process"
	"github.com/airlock-sandbox/airlock/wasm"
)

// Options configure the tiers. The zero value builds every tier cold with
// the default limits, which suits one-shot CLI runs; a long-lived server
// sets pools so that sandboxes are ready before jobs arrive.
type Options struct {
	// Limits is the operator's limit policy (zero: airlock.DefaultLimitPolicy).
	Limits airlock.LimitPolicy
	// ProcessPool is how many started sandboxes the container tier
	// ("process") keeps ready, 0 to 64.
	ProcessPool int
	// GVisorPool is how many started sandboxes the gVisor tier keeps ready.
	GVisorPool int
	// MicroVMWarm is how microVMs start: "cold" (the default) boots each
	// one, "snapshot" restores a snapshot of a booted VM.
	MicroVMWarm string
	// MicroVMPool is how many booted VMs the microVM tier keeps ready.
	MicroVMPool int
	// ProcessImagePools keep sandboxes of named images ready on the
	// container tier beside the default image's, per image reference (0 to
	// 64 each); they need Images.
	ProcessImagePools map[string]int
	// MicroVMImagePools keep VMs of named images ready on the microVM
	// tier beside the default image's, per image reference (0 to 64 each);
	// they need Images.
	MicroVMImagePools map[string]int
	// GVisorImagePools keep sandboxes of named images ready on the gVisor
	// tier beside the default image's, per image reference; they need
	// Images.
	GVisorImagePools map[string]int
	// Images gives the OS tiers their images (nil: every command job runs
	// in the host view, and a job naming an image is not admitted).
	Images image.Resolver
	// Egress is the operator's part of every egress gateway the tiers
	// start for a net-granted job: the pins (Hosts) and the decision log
	// (Log). Its listeners and rules are ignored (each job brings its
	// own); the zero value is the gateways' defaults.
	Egress egress.Config
	// Accounts are the accounts the account tier reaches, the first its
	// default (a server's accounts section); empty: those registered
	// with `airlock account add` (see account.FromRegistered).
	Accounts []account.Config
	// Account, set, is the only account the tier reaches (the command's
	// --account): one of Accounts, or a registered one.
	Account string
}

// egress returns the gateways' template, or nil for the defaults.
func (o Options) egress() (egress.Config, bool) {
	return o.Egress, len(o.Egress.Hosts) > 0 || o.Egress.Log != nil
}

// Validate checks the settings.
func (o Options) Validate() error {
	switch {
	case o.ProcessPool < 0 || o.ProcessPool > 64:
		return fmt.Errorf("process pool %d: want a pool size from 0 to 64", o.ProcessPool)
	case o.GVisorPool < 0:
		return fmt.Errorf("gVisor pool %d: want a pool size >= 0", o.GVisorPool)
	case o.MicroVMPool < 0:
		return fmt.Errorf("microVM pool %d: want a pool size >= 0", o.MicroVMPool)
	}
	for ref, n := range o.ProcessImagePools {
		if n < 0 || n > 64 {
			return fmt.Errorf("process pool of image %q: %d: want a pool size from 0 to 64", ref, n)
		}
	}
	for ref, n := range o.MicroVMImagePools {
		if n < 0 || n > 64 {
			return fmt.Errorf("microVM pool of image %q: %d: want a pool size from 0 to 64", ref, n)
		}
	}
	for ref, n := range o.GVisorImagePools {
		if n < 0 {
			return fmt.Errorf("gVisor pool of image %q: %d: want a pool size >= 0", ref, n)
		}
	}
	switch microvm.Warm(o.MicroVMWarm) {
	case "", microvm.WarmCold, microvm.WarmSnapshot:
		return nil
	}
	return fmt.Errorf("microVM warm mode %q: want %s or %s", o.MicroVMWarm, microvm.WarmCold, microvm.WarmSnapshot)
}

// Warm returns o with the warm capacity a benchmark's warm runs measure
// (two ready sandboxes or VMs, a microVM snapshot) where o sets none.
func (o Options) Warm() Options {
	if o.ProcessPool == 0 {
		o.ProcessPool = 2
	}
	if o.GVisorPool == 0 {
		o.GVisorPool = 2
	}
	if o.MicroVMWarm == "" {
		o.MicroVMWarm = string(microvm.WarmSnapshot)
	}
	if o.MicroVMPool == 0 {
		o.MicroVMPool = 2
	}
	return o
}

func (o Options) limits() airlock.LimitPolicy {
	if o.Limits == (airlock.LimitPolicy{}) {
		return airlock.DefaultLimitPolicy()
	}
	return o.Limits
}

// Entry is one tier the set can build.
type Entry struct {
	Name string
	// Level is the tier's isolation level, reported even when the tier
	// cannot be built here.
	Level airlock.Level
	// Pooled: the tier's build reads the pool settings, so its warm form
	// (Options.Warm) differs from its cold one.
	Pooled bool
	// Cost is the start-up cost the built tier declares (see
	// airlock.Tier), which orders an unbuilt one (see Lazy) for the router.
	Cost time.Duration
	// Probe says, cheaply, whether the tier can run here, as the built
	// tier's Available would (nil: it always can). It stands in for
	// Available until the tier is built (see Lazy): a missing runsc is
	// found without the gVisor tier's state sweep.
	Probe func(Options) error
	// Sessions: the built tier keeps sessions (airlock.SessionTier).
	Sessions bool
	New      func(Options) (airlock.Tier, error)
}

// Entries returns every tier this build of airlock offers, by level.
func Entries() []Entry {
	return []Entry{
		{Name: expr.Name, Level: airlock.LevelInterpreter, Cost: 200 * time.Nanosecond, New: func(o Options) (airlock.Tier, error) {
			return expr.NewWithConfig(expr.NewConfig().WithLimits(o.limits())), nil
		}},
		{Name: starlark.Name, Level: airlock.LevelInterpreter, Cost: 5 * time.Microsecond, Sessions: true, New: func(o Options) (airlock.Tier, error) {
			// Net-granted runs get an egress gateway of their own
			// (decisions in the result) behind the `http` module.
			return starlark.New(starlark.NewConfig().WithLimits(o.limits()).WithEgress(o.Egress))
		}},
		{Name: wasm.Name, Level: airlock.LevelInterpreter, Cost: 30 * time.Microsecond, New: func(o Options) (airlock.Tier, error) {
			return wasm.New(WasmConfig(o))
		}},
		{Name: process.NameFilter, Level: airlock.LevelSyscallFilter, Cost: 3 * time.Millisecond, Probe: processProbe, Sessions: true, New: func(o Options) (airlock.Tier, error) {
			return process.NewFilter(process.NewConfig().WithLimits(o.limits()))
		}},
		guarded(expr.Name, 100*time.Microsecond),
		guarded(starlark.Name, 150*time.Microsecond),
		{Name: process.NameContainer, Level: airlock.LevelContainer, Pooled: true, Cost: 12 * time.Millisecond, Probe: processProbe, Sessions: true, New: func(o Options) (airlock.Tier, error) {
			if err := o.Validate(); err != nil {
				return nil, err
			}
			cfg := process.NewConfig().WithLimits(o.limits()).WithPool(o.ProcessPool)
			if eg, ok := o.egress(); ok {
				cfg = cfg.WithEgress(eg)
			}
			if o.Images != nil {
				cfg = cfg.WithImages(o.Images)
				for ref, n := range o.ProcessImagePools {
					cfg = cfg.WithImagePool(ref, n)
				}
			}
			return process.New(cfg)
		}},
		{Name: gvisor.Name, Level: airlock.LevelVirtualisation, Pooled: true, Cost: 400 * time.Millisecond, Probe: gvisorProbe, Sessions: true, New: func(o Options) (airlock.Tier, error) {
			if err := o.Validate(); err != nil {
				return nil, err
			}
			cfg := gvisor.NewConfig().WithLimits(o.limits())
			if o.GVisorPool > 0 {
				cfg = cfg.WithPool(o.GVisorPool, 1)
			}
			if eg, ok := o.egress(); ok {
				cfg = cfg.WithEgress(eg)
			}
			if o.Images != nil {
				cfg = cfg.WithImages(o.Images)
				for ref, n := range o.GVisorImagePools {
					cfg = cfg.WithImagePool(ref, n)
				}
			}
			return gvisor.New(cfg)
		}},
		{Name: microvm.Name, Level: airlock.LevelVirtualisation, Pooled: true, Cost: 1500 * time.Millisecond, Probe: microvmProbe, New: func(o Options) (airlock.Tier, error) {
			if err := o.Validate(); err != nil {
				return nil, err
			}
			cfg := microvm.DefaultConfig().WithLimits(o.limits())
			if o.MicroVMWarm != "" {
				cfg = cfg.WithWarm(microvm.Warm(o.MicroVMWarm))
			}
			if o.MicroVMPool > 0 {
				cfg = cfg.WithPool(o.MicroVMPool)
			}
			if eg, ok := o.egress(); ok {
				cfg = cfg.WithEgress(eg)
			}
			if o.Images != nil {
				cfg = cfg.WithImages(o.Images)
				for ref, n := range o.MicroVMImagePools {
					cfg = cfg.WithImagePool(ref, n)
				}
			}
			return microvm.New(cfg)
		}},
		// Level 5: a client of the configured accounts' executors (see
		// docs/account.md); unavailable, saying how to add one, when no
		// account is configured.
		{Name: account.Name, Level: airlock.LevelAccount, Cost: 2 * time.Second, Probe: accountProbe, Sessions: true, New: func(o Options) (airlock.Tier, error) {
			return o.accountTier(), nil
		}},
	}
}

// accountTier is the account tier over the configured accounts.
func (o Options) accountTier() *account.Tier {
	if len(o.Accounts) == 0 {
		return account.FromRegistered(account.Dir(), o.Account)
	}
	if o.Account == "" {
		return account.New(o.Accounts[0], o.Accounts[1:]...)
	}
	for _, c := range o.Accounts {
		if c.Name() == o.Account {
			return account.New(c)
		}
	}
	return account.New(account.NewConfig("", "", -1).WithUnavailable(fmt.Errorf("no account %s in the configuration's accounts", o.Account)))
}

// guarded is a language tier re-executed inside the process sandbox
// (level 3), for language jobs whose situation asks for more than an
// interpreter.
func guarded(name string, cost time.Duration) Entry {
	return Entry{Name: "guarded-" + name, Level: airlock.LevelContainer, Cost: cost, Probe: processProbe, New: func(o Options) (airlock.Tier, error) {
		registerWorkers()
		return process.NewGuarded(name, process.NewConfig().WithLimits(o.limits()))
	}}
}

// WasmConfig is the WASM tier's configuration for the CLI and the server:
// the operator's limits and the on-disk compilation cache (see
// wasm.DefaultCacheDir), so that a second process starts warm, and an
// egress gateway per run with network rules (decisions in the result).
func WasmConfig(o Options) wasm.Config {
	return wasm.NewConfig().WithLimits(o.limits()).WithCacheDir(wasm.DefaultCacheDir()).WithEgress(o.Egress)
}

// Build constructs every tier. Settings that do not validate are an
// error. A tier whose backend is missing reports itself unavailable
// through airlock.Prober; a tier that cannot even be built here (no
// permission for its state directory, say) is replaced by a stand-in that
// says why, so one broken tier never stops the others — an expression
// still evaluates without root.
func Build(o Options) ([]airlock.Tier, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	return BuildFrom(Entries(), o), nil
}

// BuildFrom constructs the given entries' tiers, with a stand-in for each
// that cannot be built (see Build).
func BuildFrom(entries []Entry, o Options) []airlock.Tier {
	var out []airlock.Tier
	for _, e := range entries {
		t, err := e.New(o)
		if err != nil {
			t = &broken{name: e.Name, level: e.Level, err: fmt.Errorf("building tier %s: %w", e.Name, err)}
		}
		out = append(out, t)
	}
	return out
}

// broken stands for a tier that could not be built: it admits nothing and
// reports why it is unavailable.
type broken struct {
	name  string
	level airlock.Level
	err   error
}

func (b *broken) Name() string         { return b.name }
func (b *broken) Level() airlock.Level { return b.level }
func (b *broken) Available() error     { return b.err }
func (b *broken) Admit(airlock.Job) error {
	return &airlock.NotAdmitted{Tier: b.name, Reason: "unavailable: " + b.err.Error()}
}
func (b *broken) Run(context.Context, airlock.Job) (airlock.Result, error) {
	err := b.Admit(airlock.Job{})
	res := airlock.Result{Tier: b.name, Level: b.level}
	res.SetError(err)
	return res, err
}

// Close releases tiers that hold resources (pools, sandboxes).
func Close(tiers []airlock.Tier) error {
	var errs []error
	for _, t := range tiers {
		if c, ok := t.(io.Closer); ok {
			errs = append(errs, c.Close())
		}
	}
	return errors.Join(errs...)
}

// OpenImages opens the image store in dir for the command's tiers, or
// returns nil when dir does not exist (no image was ever imported: command
// jobs run in the host view). The command's user is the operator, so the
// host view stays available by name; the default image is the catalogue's
// python where it has been built, and the host view otherwise. Of opts,
// Progress (if set) hears about pulls and a tier's first build of an
// artefact, and AuthFile gives pulls their credentials.
func OpenImages(dir string, opts image.Options) (*image.Store, error) {
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	probe, err := image.Open(dir, image.Options{AllowHost: true, AuthFile: opts.AuthFile})
	if err != nil {
		return nil, err
	}
	def := image.Host
	if infos, err := probe.List(); err == nil {
		for _, info := range infos {
			if slices.Contains(info.Names, image.DefaultName) {
				def = image.DefaultName
			}
		}
	}
	return image.Open(dir, image.Options{AllowHost: true, Default: def, Progress: opts.Progress, AuthFile: opts.AuthFile})
}

// LazyImages is OpenImages put off until a tier first acquires an image,
// for a command that may run none: it returns nil when dir does not exist,
// as OpenImages does, and otherwise a resolver that opens the store on its
// first use (and reports, from then on, why it could not).
func LazyImages(dir string, opts image.Options) image.Resolver {
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return &lazyImages{dir: dir, opts: opts}
}

type lazyImages struct {
	dir  string
	opts image.Options
	once sync.Once
	st   *image.Store
	err  error
}

func (l *lazyImages) store() (*image.Store, error) {
	l.once.Do(func() {
		l.st, l.err = OpenImages(l.dir, l.opts)
		if l.st == nil && l.err == nil {
			l.err = fmt.Errorf("image store %s: %w", l.dir, fs.ErrNotExist)
		}
	})
	return l.st, l.err
}

func (l *lazyImages) Acquire(ctx context.Context, ref string) (*image.Image, func(), error) {
	st, err := l.store()
	if err != nil {
		return nil, nil, err
	}
	return st.Acquire(ctx, ref)
}

func (l *lazyImages) Check(ref string) error {
	st, err := l.store()
	if err != nil {
		return err
	}
	return st.Check(ref)
}

func (l *lazyImages) Derive(ctx context.Context, img *image.Image, kind string, build func(dir string) error) (string, error) {
	st, err := l.store()
	if err != nil {
		return "", err
	}
	return st.Derive(ctx, img, kind, build)
}
