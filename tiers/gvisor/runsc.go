package gvisor

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// idPrefix starts the name of every owner, sandbox, cgroup and directory
// the tier creates (see owner.go).
const idPrefix = "airlock-gv-"

// idEnd ends every sandbox id. runsc takes the id of every command as a
// prefix of the ids in its state directory, and an exact match does not
// win: while "<owner>-10" exists, `runsc delete <owner>-1` fails as
// ambiguous, and the sandbox cannot be killed. With the number closed by a
// non-digit no id extends another ("-1.sb", "-10.sb"), and owner names
// never extend one another (owner.go), so every id the tiers of a
// directory hand out names exactly one sandbox. The id also names the
// sandbox's cgroup and directory, which are matched exactly.
const idEnd = ".sb"

// newID names a new sandbox of the tier: its owner name, a number and idEnd.
func (t *Tier) newID() string {
	return t.owner + "-" + strconv.FormatUint(t.seq.Add(1), 10) + idEnd
}

// runscFlags are the global flags of every sandbox the tier creates;
// scratchMB (0: none) caps each overlay's memory layer.
func (t *Tier) runscFlags(hostUDS bool, scratchMB int64) []string {
	overlay := "all:memory"
	if scratchMB > 0 {
		overlay += fmt.Sprintf(",size=%dm", scratchMB)
	}
	f := []string{
		"--root", t.state,
		"--platform", t.cfg.platform,
		"--network", "none",
		// A fresh empty network namespace per gofer: the default shares one,
		// bind-mounted into the state directory, that outlives the sandboxes.
		"--gofer-network-namespace", "new",
		// Writable mounts (the scratch, a copy grant) get a memory-backed
		// overlay: what the job writes stays in the sandbox (charged to its
		// memory cgroup) and never reaches the host directory, which runsc
		// opens read-only.
		"--overlay2", overlay,
	}
	if hostUDS {
		f = append(f, "--host-uds", "open")
	}
	return f
}

// runscOut runs a short runsc management command and returns its output.
func (t *Tier) runscOut(ctx context.Context, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, t.runsc, append([]string{"--root", t.state}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("runsc %s: %w: %s", args[0], err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// destroy removes a sandbox and everything it held: the runsc container
// (killed if still running), its cgroup and its directory. It is safe to
// call for a sandbox that never started or is already gone; live says
// whether runsc may still hold it (a foreground `runsc run` that exited by
// itself has deleted its container already).
func (t *Tier) destroy(id, dir string, live bool) error {
	var errs []error
	if live {
		if _, err := t.runscOut(context.Background(), "delete", "--force", id); err != nil && !notExist(err) {
			errs = append(errs, err)
		}
	}
	if err := (cgroup{path: "/" + id}).remove(); err != nil {
		errs = append(errs, err)
	}
	if dir != "" {
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("destroying sandbox %s: %v", id, errs)
	}
	return nil
}

func notExist(err error) bool {
	s := err.Error()
	return strings.Contains(s, "does not exist") || strings.Contains(s, "not found") || strings.Contains(s, "no such")
}

func itoa(n int) string { return strconv.Itoa(n) }
