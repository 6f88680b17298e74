package microvm

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Every VM directory holds an "owner" file naming the host process that
// started it (pid and start time, so a recycled pid does not count) and a
// "vmm.pid" file. sweep removes the directories whose owner is gone,
// killing their VMM if it is still running under the recognisable name.

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

func writeOwner(dir string) error {
	pid := os.Getpid()
	st, err := procStartTime(pid)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "owner"), []byte(fmt.Sprintf("%d %s", pid, st)), 0o600)
}

// ownerAlive reports whether the process that wrote dir's owner file runs.
func ownerAlive(dir string) bool {
	data, err := os.ReadFile(filepath.Join(dir, "owner"))
	if err != nil {
		return false
	}
	pidS, start, ok := strings.Cut(strings.TrimSpace(string(data)), " ")
	pid, err := strconv.Atoi(pidS)
	if !ok || err != nil {
		return false
	}
	now, err := procStartTime(pid)
	return err == nil && now == start
}

// sweep kills orphaned VMs under stateDir and removes their files. It
// returns how many it removed.
func sweep(stateDir string) (int, error) {
	ents, err := os.ReadDir(stateDir)
	if err != nil {
		if os.IsNotExist(err) {
			return 0, nil
		}
		return 0, err
	}
	n := 0
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), vmNamePrefix) {
			continue
		}
		dir := filepath.Join(stateDir, e.Name())
		if ownerAlive(dir) {
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
		}
	}
	return n, nil
}

// isOurVM checks that pid is a VMM started under the name: QEMU's
// -name or Firecracker's --id.
func isOurVM(pid int, name string) bool {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && (bytes.Contains(cmdline, []byte("\x00-name\x00"+name+"\x00")) ||
		bytes.Contains(cmdline, []byte("\x00--id\x00"+name+"\x00")))
}
