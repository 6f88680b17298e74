package gvisor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/testing/tiertest"
)

// TestFSGrantAtGuestPath: a read grant placed at a guest path is read
// there, read-only, and is no longer at its host path; a link in it that
// points at a host file outside the grant leads nowhere.
func TestFSGrantAtGuestPath(t *testing.T) {
	tier := newTier(t, NewConfig())
	dir, _ := tiertest.GrantTree(t)
	j := cmdJob("sh", "-c", `cat /data/sub/data.txt
cat `+dir+`/sub/data.txt 2>/dev/null || echo not-at-host-path
cat /data/out 2>/dev/null || echo link-closed
cat /data/rel 2>/dev/null || echo link-closed
echo x 2>/dev/null > /data/new || echo read-only`)
	j.Grants.FS = airlock.FSGrant{Read: []string{dir}, At: map[string]string{dir: "/data"}}
	res, err := tier.Run(context.Background(), j)
	if err != nil {
		t.Fatal(err)
	}
	if want := "granted\nnot-at-host-path\nlink-closed\nlink-closed\nread-only\n"; res.Stdout != want || strings.Contains(res.Stdout+res.Stderr, "SECRET") {
		t.Fatalf("grant at /data: stdout %q, want %q (stderr %q)", res.Stdout, want, res.Stderr)
	}
	if exists(filepath.Join(dir, "new")) {
		t.Fatal("the job wrote into a read-only grant on the host")
	}
}

// TestFSGrantCopy: a copy is writable by the job, at a guest path or its
// own; what the job writes never reaches the host; what the job could not
// read in the grant it cannot read in the copy; a link out of it leads
// nowhere.
func TestFSGrantCopy(t *testing.T) {
	tier := newTier(t, NewConfig())
	dir, secret := tiertest.GrantTree(t)
	own, _ := tiertest.GrantTree(t)
	j := cmdJob("sh", "-c", `echo changed > /work/sub/data.txt && cat /work/sub/data.txt
echo new > /work/new.txt && cat /work/new.txt
cat /work/private 2>/dev/null || echo private-closed
cat /work/out 2>/dev/null || echo link-closed
cat /work/rel `+own+`/rel 2>/dev/null || echo link-closed
echo x 2>/dev/null > /work/out || echo link-not-written
echo mine > `+own+`/sub/data.txt && cat `+own+`/sub/data.txt`)
	j.Grants.FS = airlock.FSGrant{Read: []string{dir, own}, At: map[string]string{dir: "/work"}, Copy: []string{dir, own}}
	res, err := tier.Run(context.Background(), j)
	if err != nil {
		t.Fatal(err)
	}
	if want := "changed\nnew\nprivate-closed\nlink-closed\nlink-closed\nlink-not-written\nmine\n"; res.Stdout != want || strings.Contains(res.Stdout, "SECRET") || strings.Contains(res.Stdout, "PRIVATE") {
		t.Fatalf("copy: stdout %q, want %q (stderr %q)", res.Stdout, want, res.Stderr)
	}
	for _, d := range []string{dir, own} {
		if b, _ := os.ReadFile(filepath.Join(d, "sub", "data.txt")); string(b) != "granted\n" {
			t.Errorf("host file changed: %q", b)
		}
	}
	if exists(filepath.Join(dir, "new.txt")) {
		t.Error("the copy's new file reached the host")
	}
	if b, _ := os.ReadFile(secret); string(b) != "SECRET\n" {
		t.Errorf("secret changed: %q", b)
	}
}

// TestFSGrantCopyOverScratch: with a scratch cap, a write into a copy
// beyond it fails with no space left (the program goes on, as for the
// scratch), and a copy whose readable content does not fit in it fails the
// job before the program starts, naming grants.fs.copy.
func TestFSGrantCopyOverScratch(t *testing.T) {
	tier := newTier(t, NewConfig())
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "small"), []byte("small\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	j := cmdJob("sh", "-c", `dd if=/dev/zero of=/work/big bs=1M count=16 2>/dev/null; echo "rc=$?"; s=$(wc -c < /work/big); [ "$s" -le 4194304 ] && echo capped; cat /work/small`)
	j.Grants.FS = airlock.FSGrant{Read: []string{dir}, At: map[string]string{dir: "/work"}, Copy: []string{dir}, ScratchMB: 4}
	res, err := tier.Run(context.Background(), j)
	if err != nil {
		t.Fatal(err)
	}
	if want := "rc=1\ncapped\nsmall\n"; res.Stdout != want {
		t.Fatalf("write beyond the cap into a copy: stdout %q, want %q (stderr %q)", res.Stdout, want, res.Stderr)
	}
	if exists(filepath.Join(dir, "big")) {
		t.Fatal("the copy's write reached the host")
	}

	if err := os.WriteFile(filepath.Join(dir, "large"), make([]byte, 8<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	j = cmdJob("echo", "started")
	j.Grants.FS = airlock.FSGrant{Read: []string{dir}, Copy: []string{dir}, ScratchMB: 4}
	res, err = tier.Run(context.Background(), j)
	var inv *airlock.InvalidJob
	if !errors.As(err, &inv) || inv.Field != "grants.fs.copy" || !strings.Contains(inv.Reason, "scratch") || res.Stdout != "" {
		t.Fatalf("copy larger than the cap: want InvalidJob on grants.fs.copy, got %v (%+v)", err, res)
	}
}

// TestFSGrantAtReserved: a grant placed over the sandbox's own mounts is
// refused before anything starts.
func TestFSGrantAtReserved(t *testing.T) {
	tier, err := New(NewConfig().WithDir(t.TempDir()).WithRunsc("/nonexistent/runsc"))
	if err != nil {
		t.Fatal(err)
	}
	defer tier.Close()
	for g, ok := range map[string]bool{"/": false, "/scratch": false, "/scratch/x": false, "/tmp": false, "/.airlock": false, "/.airlock/sock": false, "/tmp/x": true, "/data": true, "/etc": true} {
		j := cmdJob("true")
		j.Grants.FS = airlock.FSGrant{Read: []string{"/usr"}, At: map[string]string{"/usr": g}}
		var na *airlock.NotAdmitted
		if err := tier.Admit(j); ok != (err == nil) || !ok && !errors.As(err, &na) {
			t.Errorf("grant at %s: admitted %v, got %v", g, ok, err)
		}
	}
}

// TestFSGrantAtMismatch: a directory placed where the sandbox has a file
// (or a file where it has a directory, through a link) is an invalid job,
// said in one line, not runsc failing to start.
func TestFSGrantAtMismatch(t *testing.T) {
	tier := newTier(t, NewConfig())
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, []byte("f\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for host, guest := range map[string]string{dir: "/etc/hostname", file: "/etc"} {
		j := cmdJob("true")
		j.Grants.FS = airlock.FSGrant{Read: []string{host}, At: map[string]string{host: guest}}
		res, err := tier.Run(context.Background(), j)
		var inv *airlock.InvalidJob
		if !errors.As(err, &inv) || inv.Field != "grants.fs.at" || !strings.Contains(inv.Reason, guest) || strings.Contains(res.Stderr, "runsc") {
			t.Errorf("%s at %s: want InvalidJob on grants.fs.at, got %v (%+v)", host, guest, err, res)
		}
	}
	// A file placed at a file's path is mounted over it.
	j := cmdJob("cat", "/etc/hostname")
	j.Grants.FS = airlock.FSGrant{Read: []string{file}, At: map[string]string{file: "/etc/hostname"}}
	if res, err := tier.Run(context.Background(), j); err != nil || res.Stdout != "f\n" {
		t.Fatalf("file over a file: %v (%+v)", err, res)
	}
}

// TestNoExecFirstProcess: a cold job without the spawn grant is the
// sandbox's first process, under the seccomp filter runsc installs: the
// job is PID 1, runs a builtin pipeline and forks itself, but neither it
// nor a child can execute another program (EPERM, the errno gVisor's OCI
// seccomp gives; 126 in a shell; also through execveat of a memfd), and a
// missing program is the usual one line with 127.
func TestNoExecFirstProcess(t *testing.T) {
	tier := newTier(t, NewConfig())
	withheld := func(argv ...string) airlock.Result {
		t.Helper()
		j := cmdJob(argv...)
		j.Grants.Spawn = false
		res, err := tier.Run(context.Background(), j)
		if err != nil {
			t.Fatalf("%v: %v (%+v)", argv, err, res)
		}
		return res
	}
	if res := withheld("sh", "-c", `echo "$$ [$_AIRLOCK_ROLE]"; echo ok | while read l; do echo "$l"; done`); res.Stdout != "1 []\nok\n" || res.ExitCode != 0 {
		t.Errorf("the job as the first process: %+v", res)
	}
	if res := withheld("sh", "-c", "cat /etc/hostname"); res.ExitCode != 126 {
		t.Errorf("an exec without the spawn grant: %+v", res)
	}
	if res := withheld("sh", "-c", "(cat /etc/hostname); echo child $?"); res.Stdout != "child 126\n" {
		t.Errorf("an exec by a forked child: %+v", res)
	}
	if res := withheld("python3", "-c", noExecProbe); res.Stdout != "execv EPERM\nexecveat EPERM\nfork ok\n" {
		t.Errorf("execv, execveat of a memfd, fork: %+v", res)
	}
	if res := withheld("no-such-program"); res.ExitCode != 127 || res.Stderr != "airlock: program \"no-such-program\" not found\n" {
		t.Errorf("a missing program: %+v", res)
	}
}

// noExecProbe tries an execv of a host program and an execveat of a
// memfd holding one, then forks, and prints what each came to.
const noExecProbe = `import errno, os
def tell(what, f):
    try:
        f()
        print(what, "ran")
    except OSError as e:
        print(what, errno.errorcode[e.errno])
tell("execv", lambda: os.execv("/bin/true", ["true"]))
fd = os.memfd_create("x")
os.write(fd, open("/bin/true", "rb").read())
tell("execveat", lambda: os.execve(fd, ["true"], {}))
pid = os.fork()
if pid == 0:
    os._exit(7)
print("fork", "ok" if os.waitpid(pid, 0)[1] >> 8 == 7 else "failed")
`
