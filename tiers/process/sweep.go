package process

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/airlock-sandbox/airlock/tiers/internal/lease"
	"github.com/airlock-sandbox/airlock/tiers/process/internal/stage"
)

var sweepMu sync.Mutex
var swept = map[string]bool{}

// sweepOnce runs the start-up sweep once per base directory per process.
func sweepOnce(baseDir string) {
	sweepMu.Lock()
	defer sweepMu.Unlock()
	if swept[baseDir] {
		return
	}
	swept[baseDir] = true
	_ = Sweep(baseDir)
}

// owners is where the owners of a base directory's sandboxes hold their
// leases (see package lease).
func owners(baseDir string) string { return filepath.Join(baseDir, "owners") }

// processOwners caches this process's lease per base directory.
var processOwners sync.Map // base directory -> *lease.Owner

// processOwner returns this process's lease in baseDir, taken on first
// use and held for the life of the process.
func processOwner(baseDir string) (*lease.Owner, error) {
	if o, ok := processOwners.Load(baseDir); ok {
		return o.(*lease.Owner), nil
	}
	// The base directory is made as the sandboxes need it, not by the
	// lease's MkdirAll.
	if err := os.MkdirAll(baseDir, 0o711); err != nil {
		return nil, err
	}
	o, err := lease.ForProcess(owners(baseDir), namePrefix)
	if err != nil {
		return nil, err
	}
	processOwners.Store(baseDir, o)
	return o, nil
}

// Sweep removes what sandboxes of airlock processes that no longer run
// left behind: their cgroups (killing any process still in them), their
// scratch mounts and /etc templates under baseDir. Names start with the
// owner's lease (<owner>-<random>); an owner is dead when a sweep can take
// its lock, or, for what is under baseDir, when its lock file is gone.
// Cgroups are shared by every base directory, so only those of owners
// whose lock this sweep holds are removed. A live owner's sandboxes are
// left alone. Names of earlier versions carry only the owner's pid
// (airlock-process-<pid>-<random>) and are judged by it.
func Sweep(baseDir string) error {
	dir := owners(baseDir)
	dead := map[string]*lease.Lock{} // held until the end: no other sweep works on these
	for _, name := range lease.Owners(dir, namePrefix) {
		if l := lease.TakeDead(dir, name); l != nil {
			dead[name] = l
		}
	}
	failed := map[string]bool{}
	var errs []error
	try := func(name string, err error) {
		if err != nil {
			errs = append(errs, err)
			if o := lease.OwnerOf(namePrefix, name); o != "" {
				failed[o] = true
			}
		}
	}
	// gone reports whether the owner of what is named name is dead; here:
	// it is under baseDir.
	gone := func(name string, here bool) bool {
		owner := lease.OwnerOf(namePrefix, name)
		switch {
		case owner == "":
			return !legacyOwnerAlive(name)
		case dead[owner] != nil:
			return true
		}
		return here && lease.Gone(dir, owner)
	}
	for _, name := range leftoverCgroups() {
		if !gone(name, false) {
			continue
		}
		// kill thaws a group a crashed airlock may have left frozen.
		if cgroupV2() {
			c := &cgroupV2m{name: name}
			try(name, c.kill(0))
			try(name, rmdirRetry(c.file("")))
		} else {
			c := &cgroupV1{name: name}
			try(name, c.kill(0))
			try(name, removeCgroupV1(name))
		}
	}
	for _, mp := range leftoverMounts(baseDir) {
		name := filepath.Base(mp)
		switch {
		case !gone(name, true):
		case strings.HasSuffix(mp, "-etc"):
			try(name, removeTemplate(mp))
		default:
			try(name, unmountScratch(mp))
		}
	}
	entries, _ := os.ReadDir(baseDir)
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), namePrefix) || !gone(e.Name(), true) {
			continue
		}
		if strings.HasSuffix(e.Name(), "-etc") {
			try(e.Name(), removeTemplate(filepath.Join(baseDir, e.Name())))
		} else {
			try(e.Name(), unmountScratch(filepath.Join(baseDir, e.Name())))
		}
	}
	for owner, l := range dead {
		if failed[owner] {
			l.Keep()
		} else {
			l.Remove()
		}
	}
	lease.Tidy(dir)
	return errors.Join(errs...)
}

// leftoverCgroups lists our cgroups in every hierarchy we use.
func leftoverCgroups() []string {
	dirs := []string{cgroupRoot}
	if !cgroupV2() {
		dirs = dirs[:0]
		for _, s := range v1Subsystems {
			dirs = append(dirs, filepath.Join(cgroupRoot, string(s)))
		}
	}
	seen := map[string]bool{}
	var out []string
	for _, d := range dirs {
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			if e.IsDir() && strings.HasPrefix(e.Name(), namePrefix) && !seen[e.Name()] {
				seen[e.Name()] = true
				out = append(out, e.Name())
			}
		}
	}
	return out
}

// leftoverMounts lists our scratch mounts under baseDir.
func leftoverMounts(baseDir string) []string {
	points, _ := stage.MountPoints("self")
	var out []string
	for _, mp := range points {
		if filepath.Dir(mp) == baseDir && strings.HasPrefix(filepath.Base(mp), namePrefix) {
			out = append(out, mp)
		}
	}
	return out
}

// legacyOwnerAlive reports whether the airlock process named in a sandbox
// name of an earlier version (airlock-process-<pid>-<random>) still runs.
func legacyOwnerAlive(name string) bool {
	rest := strings.TrimPrefix(name, namePrefix)
	pidStr, _, ok := strings.Cut(rest, "-")
	if !ok {
		return false
	}
	pid, err := strconv.Atoi(pidStr)
	if err != nil || pid <= 0 {
		return false
	}
	if pid == os.Getpid() {
		return true
	}
	err = syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
