package process

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/testing/tiertest"
	"github.com/airlock-sandbox/airlock/tiers/internal/admit"
)

func runFS(t *testing.T, tier *Tier, fs airlock.FSGrant, script string) airlock.Result {
	t.Helper()
	job := cmdJob("sh", "-c", script)
	job.Grants.FS = fs
	if err := tier.Admit(job); err != nil {
		t.Fatalf("admit: %v", err)
	}
	res, err := tier.Run(context.Background(), job)
	if err != nil {
		t.Fatalf("run %q: %v (%+v)", script, err, res)
	}
	return res
}

// TestReadGrantAtGuestPath: grants.fs.at binds the grant at the guest
// path, read-only, and not at its host path.
func TestReadGrantAtGuestPath(t *testing.T) {
	tier := newTestTier(t, bothTiers[0], testConfig(t))
	dir, _ := tiertest.GrantTree(t)
	fs := airlock.FSGrant{Read: []string{dir}, At: map[string]string{dir: "/data"}}
	if res := runFS(t, tier, fs, "cat /data/x /data/sub/data.txt"); res.ExitCode != 0 || res.Stdout != "granted\ngranted\n" {
		t.Errorf("read at the guest path: %+v", res)
	}
	res := runFS(t, tier, fs, "cat "+filepath.Join(dir, "x")+" || echo absent; ls "+dir+" || echo absent")
	if res.Stdout != "absent\nabsent\n" {
		t.Errorf("the grant is visible at its host path too: %+v", res)
	}
	if res := runFS(t, tier, fs, "echo no > /data/x || echo refused; cat /data/x"); res.Stdout != "refused\ngranted\n" {
		t.Errorf("the placed grant is writable: %+v", res)
	}
	// A link in the grant leads where it points inside the sandbox, where
	// nothing of the host is: the secret stays out.
	if res := runFS(t, tier, fs, "cat /data/out /data/up/secret 2>&1; true"); strings.Contains(res.Stdout, "SECRET") {
		t.Errorf("a link out of the grant reached the secret: %+v", res)
	}
	// A single file, placed.
	file := filepath.Join(dir, "x")
	one := airlock.FSGrant{Read: []string{file}, At: map[string]string{file: "/etc/granted.txt"}}
	if res := runFS(t, tier, one, "cat /etc/granted.txt"); res.Stdout != "granted\n" {
		t.Errorf("a file at a guest path: %+v", res)
	}
}

// TestCopyGrantIsWritable: grants.fs.copy gives a writable copy, fresh
// per run, that never reaches the host; links and what the sandbox may
// not read are not copied.
func TestCopyGrantIsWritable(t *testing.T) {
	tier := newTestTier(t, bothTiers[0], testConfig(t))
	dir, secret := tiertest.GrantTree(t)
	fs := airlock.FSGrant{Read: []string{dir}, At: map[string]string{dir: "/work"}, Copy: []string{dir}}
	res := runFS(t, tier, fs, "echo changed > /work/sub/data.txt && cat /work/sub/data.txt && echo new > /work/new.txt && mkdir /work/d && cat /work/x")
	if res.ExitCode != 0 || res.Stdout != "changed\ngranted\n" {
		t.Errorf("write into the copy: %+v", res)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "sub", "data.txt")); string(b) != "granted\n" {
		t.Errorf("the host file changed: %q", b)
	}
	for _, p := range []string{"new.txt", "d"} {
		if _, err := os.Lstat(filepath.Join(dir, p)); err == nil {
			t.Errorf("%s reached the host", p)
		}
	}
	if res := runFS(t, tier, fs, "cat /work/sub/data.txt; test -e /work/new.txt || echo fresh"); res.Stdout != "granted\nfresh\n" {
		t.Errorf("copy not fresh per run: %+v", res)
	}
	// Links are not copied, and neither is what only root may read.
	res = runFS(t, tier, fs, "cat /work/out /work/up/secret /work/private 2>&1; true")
	if strings.Contains(res.Stdout, "SECRET") || strings.Contains(res.Stdout, "PRIVATE") || !strings.Contains(res.Stdout, "No such file") {
		t.Errorf("the copy leaked: %+v", res)
	}
	if res := runFS(t, tier, fs, "ls -A /work | tr '\\n' ' '"); res.Stdout != "sub x " {
		t.Errorf("copied entries %q, want sub and x only (%+v)", res.Stdout, res)
	}
	if b, _ := os.ReadFile(secret); string(b) != "SECRET\n" {
		t.Errorf("the secret changed: %q", b)
	}
	// At its own path when no guest path is given.
	own := airlock.FSGrant{Read: []string{dir}, Copy: []string{dir}}
	if res := runFS(t, tier, own, "echo x > "+filepath.Join(dir, "new.txt")+" && cat "+filepath.Join(dir, "new.txt")); res.Stdout != "x\n" {
		t.Errorf("write into the copy at its own path: %+v", res)
	}
	if _, err := os.Stat(filepath.Join(dir, "new.txt")); err == nil {
		t.Error("the copy's new file reached the host")
	}
	// A copied file, beside a read-only grant.
	file := filepath.Join(dir, "x")
	mixed := airlock.FSGrant{Read: []string{dir, file}, At: map[string]string{dir: "/ro", file: "/rw.txt"}, Copy: []string{file}}
	if res := runFS(t, tier, mixed, "echo more >> /rw.txt; cat /rw.txt; echo no > /ro/x || echo refused"); res.Stdout != "granted\nmore\nrefused\n" {
		t.Errorf("a copied file beside a read-only grant: %+v", res)
	}
}

// TestCopyGrantSharesScratch: the copy counts against scratch_mb: a copy
// over it is an invalid job, and a copy that fits leaves the rest of the
// cap for the scratch.
func TestCopyGrantSharesScratch(t *testing.T) {
	tier := newTestTier(t, bothTiers[0], testConfig(t))
	dir := filepath.Join(t.TempDir(), "big")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "big"), make([]byte, 2<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	job := cmdJob("sh", "-c", "echo ran")
	job.Grants.FS = airlock.FSGrant{Read: []string{dir}, Copy: []string{dir}, ScratchMB: 1}
	res, err := tier.Run(context.Background(), job)
	var inv *airlock.InvalidJob
	if !errors.As(err, &inv) || inv.Field != "grants.fs.copy" || !strings.Contains(inv.Reason, "scratch_mb") {
		t.Fatalf("copy over scratch_mb: %v", err)
	}
	if strings.Contains(inv.Reason, "\n") || res.Stdout != "" {
		t.Errorf("reason %q, stdout %q", inv.Reason, res.Stdout)
	}
	// 2 MiB copied into a 3 MiB cap leaves about 1 MiB for the scratch.
	job = cmdJob("sh", "-c", "head -c 1536k /dev/zero > /scratch/f || echo full; wc -c < /big/big")
	job.Grants.FS = airlock.FSGrant{Read: []string{dir}, At: map[string]string{dir: "/big"}, Copy: []string{dir}, ScratchMB: 3}
	res, err = tier.Run(context.Background(), job)
	if err != nil || !strings.HasPrefix(res.Stdout, "full\n") || !strings.HasSuffix(res.Stdout, "2097152\n") {
		t.Errorf("the scratch beside a copy: %v, %+v", err, res)
	}
}

// TestPlacementRefusals: the level-2 tier, which has no mount namespace,
// refuses grants.fs.at and grants.fs.copy; the container refuses a guest
// path over its root or scratch.
func TestPlacementRefusals(t *testing.T) {
	dir := t.TempDir()
	var na *airlock.NotAdmitted
	filter, err := NewFilter(testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	defer filter.Close()
	for _, fs := range []airlock.FSGrant{
		{Read: []string{dir}, At: map[string]string{dir: "/data"}},
		{Read: []string{dir}, Copy: []string{dir}},
	} {
		job := cmdJob("true")
		job.Grants.FS = fs
		if err := filter.Admit(job); !errors.As(err, &na) || na.Reason != admit.FSPlacement {
			t.Errorf("level 2, %+v: %v", fs, err)
		}
	}
	tier, err := New(testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	defer tier.Close()
	for _, g := range []string{"/", "/scratch", "/tmp", "/tmp/x", "/scratch/a/b"} {
		job := cmdJob("true")
		job.Grants.FS = airlock.FSGrant{Read: []string{dir}, At: map[string]string{dir: g}}
		if err := tier.Admit(job); !errors.As(err, &na) || !strings.Contains(na.Reason, g) {
			t.Errorf("guest path %s: %v", g, err)
		}
	}
	for _, g := range []string{"/data", "/tmpdata", "/scratchy", "/etc/x"} {
		job := cmdJob("true")
		job.Grants.FS = airlock.FSGrant{Read: []string{dir}, At: map[string]string{dir: g}}
		if err := tier.Admit(job); err != nil {
			t.Errorf("guest path %s: %v", g, err)
		}
	}
	// In the host view, a guest path missing in a host directory the
	// sandbox shows is the job's fault, and nothing is made there.
	missing := "/usr/lib/airlock-no-such-mount-point"
	job := cmdJob("true")
	job.Grants.FS = airlock.FSGrant{Read: []string{dir}, At: map[string]string{dir: missing}}
	if _, err := tier.Run(context.Background(), job); airlock.KindOf(err) != airlock.ErrInvalid || !strings.Contains(err.Error(), "does not exist in /usr") {
		t.Errorf("guest path %s in the host view: %v, want invalid", missing, err)
	}
	if _, err := os.Lstat(missing); !os.IsNotExist(err) {
		t.Errorf("%s was made on the host", missing)
	}
}

// TestCopyGrantBesideOtherScratch: with a session's scratch, or a collect
// job's host scratch, the copies get a tmpfs of their own, capped at
// scratch_mb (in a session, which refuses a scratch_mb, the session's
// scratch size); nothing of the copy lands in the scratch that outlives the
// program (the session's, the collected files).
func TestCopyGrantBesideOtherScratch(t *testing.T) {
	tier := newTestTier(t, bothTiers[0], testConfig(t))
	dir, _ := tiertest.GrantTree(t)
	fs := airlock.FSGrant{Read: []string{dir}, At: map[string]string{dir: "/work"}, Copy: []string{dir}}
	ctx := context.Background()
	s, err := tier.OpenSession(ctx, airlock.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	job := cmdJob("sh", "-c", "echo changed > /work/x && cat /work/x && echo kept > /scratch/k && ls -A /scratch")
	job.Grants.FS = fs
	if res, err := s.Run(ctx, job); err != nil || res.Stdout != "changed\nk\n" {
		t.Errorf("a copy in a session: %v, %+v", err, res)
	}
	job = cmdJob("sh", "-c", "cat /work/x /scratch/k")
	job.Grants.FS = fs
	if res, err := s.Run(ctx, job); err != nil || res.Stdout != "granted\nkept\n" {
		t.Errorf("the session's next run: %v, %+v", err, res)
	}
	big := filepath.Join(t.TempDir(), "big")
	if err := os.Mkdir(big, 0o755); err != nil {
		t.Fatal(err)
	}
	// Sparse: the copy, not the host, holds its bytes.
	if f, err := os.Create(filepath.Join(big, "f")); err != nil {
		t.Fatal(err)
	} else if err := errors.Join(f.Truncate((DefaultScratchMB+1)<<20), f.Close()); err != nil {
		t.Fatal(err)
	}
	job = cmdJob("true")
	job.Grants.FS = airlock.FSGrant{Read: []string{big}, Copy: []string{big}}
	var inv *airlock.InvalidJob
	if _, err := s.Run(ctx, job); !errors.As(err, &inv) || inv.Field != "grants.fs.copy" {
		t.Errorf("a copy over the session's scratch: %v", err)
	}
	// The session's scratch is the session's: a run cannot resize it.
	job.Grants.FS.ScratchMB = 128
	var na *airlock.NotAdmitted
	if _, err := s.Run(ctx, job); !errors.As(err, &na) {
		t.Errorf("scratch_mb in a session: %v, want not admitted", err)
	}

	job = cmdJob("sh", "-c", "echo changed > /work/x && cat /work/x > out.txt")
	job.Grants.FS = fs
	job.Collect = []string{"*"}
	res, err := tier.Run(ctx, job)
	if err != nil || res.Files["out.txt"] != "changed\n" || len(res.Files) != 1 {
		t.Errorf("a copy beside collect: %v, %+v", err, res)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "x")); string(b) != "granted\n" {
		t.Errorf("the host file changed: %q", b)
	}
}
