package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/internal/jobs"
	"github.com/airlock-sandbox/airlock/internal/tierset"
)

// tierFlags are the tiers' warm capacity, from flags. Where a command also
// reads a configuration file (serve, mcp), a flag that is set overrides
// the file's tier_settings.
type tierFlags struct {
	fs                                   *flag.FlagSet
	processPool, gvisorPool, microvmPool int
	microvmWarm                          string
	imagePools                           imagePoolFlag
	images                               string
	// registryAuth is the registry credentials file pulls use
	// (image.Options.AuthFile).
	registryAuth string
	// lazyImages: the store is opened when a tier first acquires an
	// image (tierset.LazyImages), not before the command starts.
	lazyImages bool
	// progress, if set, shows the image store's long work (a first disk
	// build, say) as it happens.
	progress func(image.Event)
	// The operator's egress pins and decision log (see egressOptions).
	hosts, egressLog string
	logFile          *os.File
	// account is the only account the account tier reaches (--account).
	account string
}

func (f *tierFlags) register(fs *flag.FlagSet) {
	f.fs = fs
	fs.IntVar(&f.processPool, "process-pool", 0, "`N` started sandboxes the container tier (process) keeps ready, 0-64 (default 0: each job starts one)")
	fs.IntVar(&f.gvisorPool, "gvisor-pool", 0, "`N` started sandboxes the gVisor tier keeps ready (default 0: each job starts one)")
	fs.StringVar(&f.microvmWarm, "microvm-warm", "", "how microVMs start, `MODE`: cold (default) or snapshot")
	fs.IntVar(&f.microvmPool, "microvm-pool", 0, "`N` booted VMs the microVM tier keeps ready (default 0)")
	fs.Var(&f.imagePools, "image-pool", "keep `TIER:IMAGE=N` sandboxes of an image ready beside the default image's, on process, gvisor or microvm (repeatable; 0 removes one the configuration sets)")
	fs.StringVar(&f.hosts, "hosts", "", "egress pins for net-granted jobs: a `FILE` of /etc/hosts-like lines (address name...); the only way a name reaches a private address")
	fs.StringVar(&f.egressLog, "egress-log", "", "append every egress decision of net-granted jobs to `FILE`, as JSON lines")
	fs.StringVar(&f.images, "images", "", "image store `DIR` (default: $"+image.DirEnv+", else "+image.DefaultDir()+")")
	registryAuthFlag(fs, &f.registryAuth)
	fs.StringVar(&f.account, "account", "", "the only account level-5 jobs run under: a `NAME` that airlock account add registered, or (serve, mcp) one of the configuration's accounts (default: AIRLOCK_ACCOUNT, else the only one registered, or the configuration's)")
}

// registerOnly registers the named tier flags alone (see onlyFlags).
func (f *tierFlags) registerOnly(fs *flag.FlagSet, names ...string) {
	onlyFlags(fs, f.register, names...)
	f.fs = fs // options looks at the flags set on fs
}

// registryAuthFlag registers --registry-auth, the credentials file of
// registry pulls.
func registryAuthFlag(fs *flag.FlagSet, p *string) {
	fs.StringVar(p, "registry-auth", "", "registry credentials for pulls: a `FILE` in docker's config.json format (auths per registry: registrytoken, identitytoken, or user and password), mode 0600; a registry it does not name is pulled from anonymously")
}

// options returns base with the flags that were set applied, checked.
func (f *tierFlags) options(base tierset.Options) (tierset.Options, error) {
	if f.fs != nil {
		f.fs.Visit(func(fl *flag.Flag) {
			switch fl.Name {
			case "process-pool":
				base.ProcessPool = f.processPool
			case "gvisor-pool":
				base.GVisorPool = f.gvisorPool
			case "microvm-warm":
				base.MicroVMWarm = f.microvmWarm
			case "microvm-pool":
				base.MicroVMPool = f.microvmPool
			case "account":
				base.Account = f.account
			case "image-pool":
				for _, p := range f.imagePools {
					switch p.tier {
					case "process":
						base.ProcessImagePools = withPool(base.ProcessImagePools, p.ref, p.n)
					case "gvisor":
						base.GVisorImagePools = withPool(base.GVisorImagePools, p.ref, p.n)
					case "microvm":
						base.MicroVMImagePools = withPool(base.MicroVMImagePools, p.ref, p.n)
					}
				}
			}
		})
	}
	if err := base.Validate(); err != nil {
		return base, jobs.Invalid("", "%s", err.Error())
	}
	if err := f.egressOptions(&base.Egress); err != nil {
		return base, err
	}
	if base.Images == nil {
		dir := f.images
		if dir == "" {
			dir = image.DefaultDir()
		}
		if f.lazyImages {
			base.Images = tierset.LazyImages(dir, image.Options{Progress: f.progress, AuthFile: f.registryAuth})
			return base, nil
		}
		st, err := tierset.OpenImages(dir, image.Options{Progress: f.progress, AuthFile: f.registryAuth})
		if err != nil {
			return base, err
		}
		if st != nil { // a nil *Store is not a nil Resolver
			base.Images = st
		}
	}
	return base, nil
}

// egressOptions sets the --hosts pins and the --egress-log sink on cfg,
// the template of the tiers' egress gateways. The log file stays open
// until close.
func (f *tierFlags) egressOptions(cfg *egress.Config) error {
	if f.hosts != "" {
		r, err := os.Open(f.hosts)
		if err != nil {
			return jobs.Invalid("--hosts", "%v", err)
		}
		h, err := egress.ParseHosts(r)
		r.Close()
		if err != nil {
			return jobs.Invalid("--hosts", "%s: %v", f.hosts, err)
		}
		cfg.Hosts = h
	}
	if f.egressLog != "" && f.logFile == nil {
		w, err := os.OpenFile(f.egressLog, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		if err != nil {
			return jobs.Invalid("--egress-log", "%v", err)
		}
		f.logFile = w
		cfg.Log = egress.JSONSink(w)
	}
	return nil
}

// close closes the egress log, if one was opened.
func (f *tierFlags) close() {
	if f.logFile != nil {
		_ = f.logFile.Close()
		f.logFile = nil
	}
}

// imagePoolFlag is --image-pool, repeated: TIER:IMAGE=N each.
type imagePoolFlag []imagePool

type imagePool struct {
	tier, ref string
	n         int
}

func (f *imagePoolFlag) String() string {
	var parts []string
	for _, p := range *f {
		parts = append(parts, fmt.Sprintf("%s:%s=%d", p.tier, p.ref, p.n))
	}
	return strings.Join(parts, ",")
}

func (f *imagePoolFlag) Set(v string) error {
	tier, rest, ok1 := strings.Cut(v, ":")
	ref, num, ok2 := cutLast(rest, "=")
	n, err := strconv.Atoi(num)
	if !ok1 || !ok2 || ref == "" || err != nil {
		return fmt.Errorf("%q: want TIER:IMAGE=N (process:python=2)", v)
	}
	if tier != "process" && tier != "gvisor" && tier != "microvm" {
		return fmt.Errorf("%q: tier %q keeps no pools per image (want process, gvisor or microvm)", v, tier)
	}
	*f = append(*f, imagePool{tier, ref, n})
	return nil
}

// cutLast is strings.Cut at the last sep (the size follows the image,
// whose reference has ':' of its own).
func cutLast(s, sep string) (before, after string, ok bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}

// withPool returns a copy of sizes with ref's set to n (the configuration's
// map is not written).
func withPool(sizes map[string]int, ref string, n int) map[string]int {
	out := make(map[string]int, len(sizes)+1)
	for k, v := range sizes {
		out[k] = v
	}
	out[ref] = n
	return out
}

// checkPoolImages refuses a pool of an image the store does not hold by
// that name or digest: such a pool would never fill, and the server would
// say so nowhere. A registry reference is not checked here (its pool pulls
// it when it first fills).
func checkPoolImages(st *image.Store, o tierset.Options) error {
	for _, tp := range []struct {
		tier  string
		pools map[string]int
	}{{"process", o.ProcessImagePools}, {"gvisor", o.GVisorImagePools}, {"microvm", o.MicroVMImagePools}} {
		for _, ref := range slices.Sorted(maps.Keys(tp.pools)) {
			if tp.pools[ref] == 0 || strings.Contains(ref, "/") {
				continue
			}
			_, release, err := st.Acquire(context.Background(), ref)
			if err != nil {
				var ie *image.Error
				if errors.As(err, &ie) && ie.Invalid {
					return jobs.Invalid("", "pool %s:%s: %v", tp.tier, ref, err)
				}
				return fmt.Errorf("pool %s:%s: %w", tp.tier, ref, err)
			}
			release()
		}
	}
	return nil
}
