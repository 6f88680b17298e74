package microvm

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
	"github.com/airlock-sandbox/airlock/internal/testing/tiertest"
	"github.com/airlock-sandbox/airlock/tiers/internal/hostids"
)

// TestVMMUser: a root-run tier's QEMU runs as a uid and gid of its own,
// with no supplementary groups, in namespaces of its own, in a directory
// of that user's; the VM's
// directory, which holds what the host trusts, stays root's, and the
// control socket is the VM user's to connect to. The uid is free again
// once the VM is gone.
func TestVMMUser(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skipf(t, "QEMU runs as a user of its own only when the tier runs as root")
	}
	tier := shared.get(t, WarmCold)
	if err := tier.Available(); err != nil {
		tiertest.Unavailable(t, Name, err)
	}
	if !tier.vmmUser {
		t.Fatalf("QEMU runs as %s", tier.VMMUser())
	}
	// The state directory is the package's tests': other tiers' VMs (a
	// spare waiting for a restore) may be there too.
	before := map[string]bool{}
	if ents, err := os.ReadDir(tier.cfg.stateDir); err == nil {
		for _, e := range ents {
			before[e.Name()] = true
		}
	}
	job := command("sh", "-c", "sleep 3; echo done")
	job.Grants.Spawn = true
	done := make(chan error, 1)
	go func() {
		res, err := tier.Run(context.Background(), job)
		if err == nil && res.Stdout != "done\n" {
			t.Errorf("stdout %q, stderr %q", res.Stdout, res.Stderr)
		}
		done <- err
	}()
	var pid int
	var dir string
	for deadline := time.Now().Add(60 * time.Second); pid == 0 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		ents, _ := os.ReadDir(tier.cfg.stateDir)
		for _, e := range ents {
			if before[e.Name()] || !strings.HasPrefix(e.Name(), vmNamePrefix) || strings.HasPrefix(e.Name(), vmNamePrefix+"owner") {
				continue
			}
			if data, err := os.ReadFile(filepath.Join(tier.cfg.stateDir, e.Name(), "vmm.pid")); err == nil {
				pid, _ = strconv.Atoi(strings.TrimSpace(string(data)))
				dir = filepath.Join(tier.cfg.stateDir, e.Name())
			}
		}
	}
	if pid == 0 {
		t.Fatal("no VM started")
	}
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	var uid uint32
	for _, line := range strings.Split(string(status), "\n") {
		k, v, _ := strings.Cut(line, ":")
		f := strings.Fields(v)
		switch k {
		case "Uid", "Gid":
			for _, id := range f {
				n, _ := strconv.ParseUint(id, 10, 32)
				if n < vmmIDBase || n >= vmmIDBase+vmmIDCount || id != f[0] {
					t.Errorf("QEMU's %s: %s", k, v)
				}
			}
			if k == "Uid" && len(f) > 0 {
				n, _ := strconv.ParseUint(f[0], 10, 32)
				uid = uint32(n)
			}
		case "Groups":
			if len(f) != 0 {
				t.Errorf("QEMU's supplementary groups: %s", v)
			}
		}
	}
	// Namespaces of its own: no host network (its netns has a loopback
	// and nothing else), processes or IPC.
	for _, ns := range []string{"net", "ipc", "uts", "pid"} {
		theirs, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/" + ns)
		ours, _ := os.Readlink("/proc/self/ns/" + ns)
		if err != nil || theirs == ours {
			t.Errorf("QEMU's %s namespace: %q (%v), ours %q", ns, theirs, err, ours)
		}
	}
	if dev, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/net/dev"); err != nil {
		t.Error(err)
	} else {
		for _, line := range strings.Split(string(dev), "\n")[2:] {
			if name, _, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && name != "lo" {
				t.Errorf("QEMU sees the network interface %s", name)
			}
		}
	}
	owned := func(path string, wantUID uint32, wantMode os.FileMode) {
		t.Helper()
		st, err := os.Lstat(path)
		if err != nil {
			t.Error(err)
			return
		}
		if got := st.Sys().(*syscall.Stat_t).Uid; got != wantUID || st.Mode().Perm() != wantMode&os.ModePerm {
			t.Errorf("%s: uid %d mode %v, want uid %d mode %v", path, got, st.Mode().Perm(), wantUID, wantMode&os.ModePerm)
		}
	}
	owned(dir, 0, 0o711)
	owned(filepath.Join(dir, "owner"), 0, 0o600)
	owned(filepath.Join(dir, "vmm"), uid, 0o700)
	if st, err := os.Lstat(filepath.Join(dir, "ctl.sock")); err != nil || st.Sys().(*syscall.Stat_t).Uid != uid {
		t.Errorf("ctl.sock: %v, %v", st, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	assertNoVMs(t, tier)
	if hostids.Held(uid) {
		t.Errorf("uid %d still held after its VM was reaped", uid)
	}
}

// TestVMMUserBlocked: a state directory behind a directory closed to
// others keeps QEMU as this process's user, and says why.
func TestVMMUserBlocked(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skipf(t, "QEMU runs as a user of its own only when the tier runs as root")
	}
	closed, err := os.MkdirTemp("", "airlock-vmmuser-") // 0700, in a directory open to all
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(closed)
	state := filepath.Join(closed, "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	if why := vmmUserBlocked(state, "/bin/sh"); !strings.Contains(why, closed+" is closed to other users") {
		t.Errorf("blocked: %q", why)
	}
	if st, _ := os.Stat(state); st.Mode().Perm() != 0o711 {
		t.Errorf("state directory mode %v, want 0711", st.Mode().Perm())
	}
	if err := os.Chmod(closed, 0o711); err != nil {
		t.Fatal(err)
	}
	if why := vmmUserBlocked(state, "/bin/sh"); why != "" {
		t.Errorf("open: %q", why)
	}
}
