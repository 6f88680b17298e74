package process

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

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

// Sweep removes what sandboxes of an airlock process that no longer runs
// left behind: their cgroups (killing any process still in them), their
// scratch mounts and /etc templates under baseDir. Names carry the owner's pid
// (airlock-process-<pid>-<random>); a live owner's sandboxes are left
// alone.
func Sweep(baseDir string) error {
	var errs []error
	for _, name := range leftoverCgroups() {
		if ownerAlive(name) {
			continue
		}
		// kill thaws a group a crashed airlock may have left frozen.
		if cgroupV2() {
			c := &cgroupV2m{name: name}
			errs = append(errs, c.kill(0), rmdirRetry(c.file("")))
		} else {
			c := &cgroupV1{name: name}
			errs = append(errs, c.kill(0), removeCgroupV1(name))
		}
	}
	for _, dir := range leftoverMounts(baseDir) {
		switch {
		case ownerAlive(filepath.Base(dir)):
		case strings.HasSuffix(dir, "-etc"):
			errs = append(errs, removeTemplate(dir))
		default:
			errs = append(errs, unmountScratch(dir))
		}
	}
	entries, _ := os.ReadDir(baseDir)
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), namePrefix) || ownerAlive(e.Name()) {
			continue
		}
		if strings.HasSuffix(e.Name(), "-etc") {
			errs = append(errs, removeTemplate(filepath.Join(baseDir, e.Name())))
		} else {
			errs = append(errs, unmountScratch(filepath.Join(baseDir, e.Name())))
		}
	}
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

// ownerAlive reports whether the airlock process named in a sandbox name
// still runs.
func ownerAlive(name string) bool {
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
