package microvm

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/tiers/internal/lease"
)

// Every VM directory holds an "owner" file naming the lease (see package
// lease) of the host process that made it, held in <state>/owners for the
// life of the process, and a "vmm.pid" file. sweep removes the directories
// whose owner is dead, killing their VMM if it is still running under the
// recognisable name. Owner files of earlier versions name a pid and its
// start time instead, and are judged by those.

// ownerPrefix starts the names of the owners of VM directories.
const ownerPrefix = vmNamePrefix + "owner-"

// ownersDir is where the owners of VM directories in stateDir hold their
// leases.
func ownersDir(stateDir string) string { return filepath.Join(stateDir, "owners") }

// writeOwner names this process's lease in dir.
func writeOwner(dir string) error {
	o, err := lease.ForProcess(ownersDir(filepath.Dir(dir)), ownerPrefix)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "owner"), []byte(o.Name()), 0o600)
}

// sweep kills orphaned VMs under stateDir and removes their files, and
// the leases of their dead owners. It returns how many VMs it removed.
func sweep(stateDir string) (int, error) {
	ents, err := os.ReadDir(stateDir)
	if err != nil {
		if os.IsNotExist(err) {
			return 0, nil
		}
		return 0, err
	}
	owners := ownersDir(stateDir)
	dead := map[string]*lease.Lock{} // held until the end: no other sweep works on these
	failed := map[string]bool{}
	for _, name := range lease.Owners(owners, ownerPrefix) {
		if l := lease.TakeDead(owners, name); l != nil {
			dead[name] = l
		}
	}
	n := 0
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), vmNamePrefix) {
			continue
		}
		dir := filepath.Join(stateDir, e.Name())
		owner, alive := ownerOf(dir, owners, dead)
		if alive {
			continue
		}
		if data, err := os.ReadFile(filepath.Join(dir, "vmm.pid")); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil && pid > 1 && isOurVM(pid, e.Name()) {
				_ = syscall.Kill(-pid, syscall.SIGKILL)
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if err := os.RemoveAll(dir); err == nil {
			n++
		} else if owner != "" {
			failed[owner] = true
		}
	}
	for name, l := range dead {
		if failed[name] {
			l.Keep()
		} else {
			l.Remove()
		}
	}
	return n, nil
}

// ownerGrace is how long a VM directory without an owner is taken for
// one whose owner is being written.
const ownerGrace = time.Minute

// ownerOf reads dir's owner file: the owner's lease name (if it names
// one) and whether the owner is alive. dead holds the locks of dead
// owners; an owner whose lock file is gone is dead too.
//
// A directory is made before its owner file is written, and the file is
// empty for a moment as it is written: one without an owner is taken for
// one being made, alive, while it is younger than ownerGrace, so that a
// sweep by another process does not remove it under the VM it is for.
func ownerOf(dir, owners string, dead map[string]*lease.Lock) (owner string, alive bool) {
	data, err := os.ReadFile(filepath.Join(dir, "owner"))
	s := strings.TrimSpace(string(data))
	if (err == nil || os.IsNotExist(err)) && s == "" {
		st, err := os.Lstat(dir)
		return "", err == nil && time.Since(st.ModTime()) < ownerGrace
	}
	if err != nil {
		return "", false
	}
	if lease.IsName(ownerPrefix, s) {
		return s, dead[s] == nil && !lease.Gone(owners, s)
	}
	pidS, start, ok := strings.Cut(s, " ")
	pid, err := strconv.Atoi(pidS)
	if !ok || err != nil {
		return "", false
	}
	now, err := procStartTime(pid)
	return "", err == nil && now == start
}

// procStartTime is the start time of pid, for owner files of earlier
// versions.
func procStartTime(pid int) (string, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", err
	}
	// The command name (field 2) may hold spaces; fields after it are plain.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return "", fmt.Errorf("malformed stat for %d", pid)
	}
	fields := strings.Fields(string(data[i+1:]))
	if len(fields) < 20 {
		return "", fmt.Errorf("malformed stat for %d", pid)
	}
	return fields[19], nil // field 22: starttime
}

// isOurVM checks that pid is a VMM started under the name: QEMU's
// -name or Firecracker's --id.
func isOurVM(pid int, name string) bool {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && (bytes.Contains(cmdline, []byte("\x00-name\x00"+name+"\x00")) ||
		bytes.Contains(cmdline, []byte("\x00--id\x00"+name+"\x00")))
}
