package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
)

func TestMicroVMCommand(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Run(context.Background(), []string{"microvm", "bogus"}, nil, &out, &errb); code != exitUsage {
		t.Fatalf("bad argument: exit %d", code)
	}
	out.Reset()
	code := Run(context.Background(), []string{"microvm", "status"}, nil, &out, &errb)
	switch code {
	case exitOK:
		if !strings.Contains(out.String(), "guest kernel: ") || !strings.Contains(out.String(), "accelerator: ") ||
			!strings.Contains(out.String(), "QEMU runs as: ") || !strings.Contains(out.String(), "QEMU namespaces: ") {
			t.Fatalf("status output %q", out.String())
		}
	case exitNotAdmitted:
		if !strings.Contains(out.String(), "unavailable") {
			t.Fatalf("status output %q", out.String())
		}
	default:
		t.Fatalf("exit %d: %s", code, errb.String())
	}
}

// TestStateDirsPerUser: the microVM tier and the image store work
// without root, and a user who uses them (an `airlock microvm status` or
// `airlock images` suffices) must not take the directories root's or
// another user's use, nor be shut out by theirs: each runs in turn in
// one shared TMPDIR, as in /tmp.
func TestStateDirsPerUser(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skipf(t, "running airlock as another user needs root")
	}
	// The test binary is the CLI (AIRLOCK_CLI_CHILD), copied where uid
	// 65534 may run it.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	binDir := t.TempDir()
	openDir(t, binDir)
	exe := filepath.Join(binDir, "airlock")
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exe, data, 0o755); err != nil {
		t.Fatal(err)
	}
	// Each user has a home of its own, or none (the cache then falls back
	// to TMPDIR too).
	status := func(t *testing.T, tmp string, uid uint32, withHome bool, args ...string) {
		t.Helper()
		c := exec.Command(exe, args...)
		c.Env = []string{"AIRLOCK_CLI_CHILD=1", "TMPDIR=" + tmp, "PATH=" + os.Getenv("PATH")}
		if withHome {
			home := filepath.Join(tmp, fmt.Sprintf("home-%d", uid))
			if err := os.MkdirAll(home, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(home, int(uid), int(uid)); err != nil {
				t.Fatal(err)
			}
			c.Env = append(c.Env, "HOME="+home)
		}
		if uid != 0 {
			c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		}
		out, _ := c.CombinedOutput()
		if strings.Contains(string(out), "state directory") || strings.Contains(string(out), "permission denied") {
			t.Errorf("airlock %s as uid %d after the other user (home: %v): %s", strings.Join(args, " "), uid, withHome, out)
		}
	}
	for _, withHome := range []bool{true, false} {
		for _, order := range [][]uint32{{65534, 0}, {0, 65534}, {65534, 65533}} {
			tmp, err := os.MkdirTemp("", "airlock-statedir-")
			if err != nil {
				t.Fatal(err)
			}
			// Both users' state directories go with it.
			t.Cleanup(func() { os.RemoveAll(tmp) })
			if err := os.Chmod(tmp, 0o777|os.ModeSticky); err != nil {
				t.Fatal(err)
			}
			openDir(t, tmp)
			for _, uid := range order {
				status(t, tmp, uid, withHome, "microvm", "status")
				status(t, tmp, uid, withHome, "images")
			}
		}
	}
}
