package microvm

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/tiers/microvm/internal/wire"
)

// TestReadGrant grants a host directory and a host file: both appear,
// read-only, at their own paths in the guest (the directory's nested
// file, its link kept as a link, the file's content), and nothing written
// there reaches the host.
func TestReadGrant(t *testing.T) {
	tier := shared.get(t, WarmCold)
	base := t.TempDir()
	dir := filepath.Join(base, "granted")
	must(t, os.MkdirAll(filepath.Join(dir, "sub"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "sub", "ok.txt"), []byte("granted\n"), 0o644))
	must(t, os.Symlink("sub/ok.txt", filepath.Join(dir, "link")))
	file := filepath.Join(base, "one.txt")
	must(t, os.WriteFile(file, []byte("one file\n"), 0o644))
	job := command("sh", "-c", strings.Join([]string{
		"cat " + dir + "/sub/ok.txt " + dir + "/link " + file,
		"readlink " + dir + "/link",
		"echo x > " + dir + "/planted 2>/dev/null || echo dir-ro",
		"echo x > " + file + " 2>/dev/null || echo file-ro",
		"ls " + base,
	}, "\n"))
	job.Grants.Spawn = true
	job.Grants.FS.Read = []string{dir, file}
	res, err := tier.Run(context.Background(), job)
	if err != nil {
		t.Fatalf("%v (stderr %q)", err, res.Stderr)
	}
	want := "granted\ngranted\none file\nsub/ok.txt\ndir-ro\nfile-ro\ngranted\none.txt\n"
	if res.Stdout != want {
		t.Errorf("stdout %q, want %q (stderr %q)", res.Stdout, want, res.Stderr)
	}
	if _, err := os.Lstat(filepath.Join(dir, "planted")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a file was planted in the granted directory: %v", err)
	}
	if b, _ := os.ReadFile(file); string(b) != "one file\n" {
		t.Errorf("the granted file changed: %q", b)
	}
	assertNoVMs(t, tier)
}

// TestReadGrantPlaced: a directory placed at a guest path (grants.fs.at)
// is there, read-only, and not at its host path; a directory copied
// (grants.fs.copy) to a guest path and a file copied at its own path are
// writable, their writes bounded by scratch_mb, and nothing of them
// reaches the host. A snapshot tier runs it as a cold one would.
func TestReadGrantPlaced(t *testing.T) {
	tier := shared.get(t, WarmSnapshot)
	base := t.TempDir()
	at := filepath.Join(base, "at")
	cp := filepath.Join(base, "cp")
	file := filepath.Join(base, "one.txt")
	for _, d := range []string{at, cp} {
		must(t, os.MkdirAll(filepath.Join(d, "sub"), 0o755))
		must(t, os.WriteFile(filepath.Join(d, "sub", "ok.txt"), []byte(filepath.Base(d)+"\n"), 0o644))
	}
	must(t, os.WriteFile(file, []byte("one file\n"), 0o644))
	// A copy holds only what the job could read of the grant read-only:
	// no file kept from other users, no link.
	must(t, os.WriteFile(filepath.Join(cp, "secret.txt"), []byte("SECRET-0600\n"), 0o600))
	must(t, os.Symlink(file, filepath.Join(cp, "link")))
	job := command("sh", "-c", strings.Join([]string{
		"cat /data/sub/ok.txt",
		"[ -e " + at + " ] || echo at-not-at-host-path",
		"echo x > /data/planted 2>/dev/null || echo at-ro",
		"cat /work/sub/ok.txt",
		"echo changed > /work/sub/ok.txt && cat /work/sub/ok.txt",
		"echo new > /work/new.txt && cat /work/new.txt",
		"[ -e " + cp + " ] || echo cp-not-at-host-path",
		"echo file-changed > " + file + " && cat " + file,
		"dd if=/dev/zero of=/work/big bs=1M count=8 2>/dev/null || echo capped",
		"[ -e /work/secret.txt ] || echo secret-left-out",
		"[ -L /work/link ] || echo link-left-out",
	}, "\n"))
	job.Grants.Spawn = true
	job.Grants.FS = airlock.FSGrant{
		Read:      []string{at, cp, file},
		At:        map[string]string{at: "/data", cp: "/work"},
		Copy:      []string{cp, file},
		ScratchMB: 4,
	}
	res, err := tier.Run(context.Background(), job)
	if err != nil {
		t.Fatalf("%v (stderr %q)", err, res.Stderr)
	}
	want := "at\nat-not-at-host-path\nat-ro\ncp\nchanged\nnew\ncp-not-at-host-path\nfile-changed\ncapped\nsecret-left-out\nlink-left-out\n"
	if res.Stdout != want || strings.Contains(res.Stdout+res.Stderr, "SECRET-0600") {
		t.Errorf("stdout %q, want %q (stderr %q)", res.Stdout, want, res.Stderr)
	}
	for p, want := range map[string]string{
		filepath.Join(at, "sub", "ok.txt"): "at\n",
		filepath.Join(cp, "sub", "ok.txt"): "cp\n",
		file:                               "one file\n",
	} {
		if b, err := os.ReadFile(p); err != nil || string(b) != want {
			t.Errorf("host file %s now %q (%v), want %q", p, b, err, want)
		}
	}
	for _, p := range []string{filepath.Join(at, "planted"), filepath.Join(cp, "new.txt"), filepath.Join(cp, "big")} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s reached the host: %v", p, err)
		}
	}
	assertNoVMs(t, tier)
}

// TestCopyOverScratch: copies larger than scratch_mb are an invalid job,
// with the reason on one line, before any VM starts.
func TestCopyOverScratch(t *testing.T) {
	tier := shared.get(t, WarmCold)
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "big"), make([]byte, 3<<20), 0o644))
	job := command("true")
	job.Grants.FS = airlock.FSGrant{Read: []string{dir}, Copy: []string{dir}, ScratchMB: 2}
	_, err := tier.Run(context.Background(), job)
	var inv *airlock.InvalidJob
	if !errors.As(err, &inv) || inv.Field != "grants.fs.copy" || !strings.Contains(inv.Reason, "does not fit in the scratch") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("copy over scratch_mb: %v", err)
	}
	// Within it, the same copy is admitted and runs.
	job.Grants.FS.ScratchMB = 4
	job.Argv = []string{"wc", "-c", dir + "/big"}
	res, err := tier.Run(context.Background(), job)
	if want := "3145728 " + dir + "/big\n"; err != nil || res.Stdout != want {
		t.Fatalf("copy within scratch_mb: %v, stdout %q, want %q (stderr %q)", err, res.Stdout, want, res.Stderr)
	}
	assertNoVMs(t, tier)
}

// TestReadGrantRefused: what cannot be shown in a VM is not admitted,
// with the reason: a path over the copy cap (a sparse file, so the test
// writes nothing), a path of another kind (a FIFO), the host's root.
func TestReadGrantRefused(t *testing.T) {
	tier := &Tier{cfg: DefaultConfig()}
	dir := t.TempDir()
	big := filepath.Join(dir, "big")
	f, err := os.Create(big)
	must(t, err)
	must(t, f.Truncate(maxReadBytes+1))
	must(t, f.Close())
	fifo := filepath.Join(dir, "fifo")
	must(t, syscall.Mkfifo(fifo, 0o644))
	for _, c := range []struct{ path, want string }{
		{big, "over the microvm tier's cap for read grants"},
		{dir, "over the microvm tier's cap for read grants"},
		{fifo, "neither a directory nor a regular file"},
		{"/", "would replace the job's root"},
		{dir + "/small", "would replace the job's root"},
	} {
		job := command("true")
		job.Grants.FS.Read = []string{c.path}
		if c.path == dir+"/small" {
			job.Grants.FS.At = map[string]string{c.path: "/"}
		}
		err := tier.Admit(job)
		var na *airlock.NotAdmitted
		if !errors.As(err, &na) || !strings.Contains(na.Reason, c.want) || strings.Contains(na.Reason, "\n") {
			t.Errorf("%s: Admit = %v, want not admitted: %s", c.path, err, c.want)
		}
	}
	job := command("true")
	job.Grants.FS.Read = []string{filepath.Join(dir, "small")}
	must(t, os.WriteFile(job.Grants.FS.Read[0], []byte("x"), 0o644))
	if err := tier.Admit(job); err != nil {
		t.Errorf("a small file: %v", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestReadArgs: each read grant's disk is attached read-only under its
// serial, after the image's (named by its own serial); a host-view VM
// with read grants loads the block and EROFS drivers.
func TestReadArgs(t *testing.T) {
	tier := &Tier{cfg: testConfig(), assets: &assets{qemu: "qemu", kernel: "vmlinux", initrd: "initrd"}}
	h := &heldImage{img: &image.Image{Digest: "sha256:x"}, disk: "/img/root.erofs"}
	reads := []readDisk{
		{Read: wire.Read{Path: "/srv/a", Serial: readSerial(0)}, disk: "/run/r,0.erofs"},
		{Read: wire.Read{Path: "/srv/b", Serial: readSerial(1), File: true}, disk: "/run/r1.erofs"},
	}
	args := strings.Join(tier.qemuArgs("id", "/dir", vmSpec{memMB: 64, vcpus: 1, img: h, reads: reads}), " ")
	order := []string{
		"readonly=on,file=/img/root.erofs", "virtio-blk-device,drive=root,serial=" + wire.RootSerial,
		"id=read0,if=none,format=raw,readonly=on,file=/run/r,,0.erofs", "virtio-blk-device,drive=read0,serial=airlock-read-0",
		"id=read1,if=none,format=raw,readonly=on,file=/run/r1.erofs", "virtio-blk-device,drive=read1,serial=airlock-read-1",
	}
	at := 0
	for _, w := range order {
		i := strings.Index(args[at:], w)
		if i < 0 {
			t.Fatalf("args lack %q after offset %d: %s", w, at, args)
		}
		at += i + len(w)
	}
	plain := strings.Join(tier.qemuArgs("id", "/dir", vmSpec{memMB: 64, vcpus: 1, reads: reads[:1]}), " ")
	if !strings.Contains(plain, ","+readModules) || strings.Contains(plain, "airlock.root") || strings.Count(plain, "-drive") != 1 {
		t.Errorf("host view with a read grant: %s", plain)
	}
	if strings.Contains(plain, copyModules) {
		t.Errorf("host view without a copy grant loads %s: %s", copyModules, plain)
	}
	copied := []readDisk{{Read: wire.Read{Path: "/srv/a", Serial: readSerial(0), Copy: true}, disk: "/run/r0.erofs"}}
	withCopy := strings.Join(tier.qemuArgs("id", "/dir", vmSpec{memMB: 64, vcpus: 1, reads: copied}), " ")
	if !strings.Contains(withCopy, ","+readModules+","+copyModules) || !strings.Contains(withCopy, "readonly=on,file=/run/r0.erofs") {
		t.Errorf("host view with a copy grant: %s", withCopy)
	}
}
